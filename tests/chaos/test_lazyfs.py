"""Self-test of the power-loss nemesis (R38): the lazy file system keeps exactly what was
fsynced. `Shadow` (the unsynced state of a file) is checked against a plain bytearray
model; the mounted file system against the POSIX calls the broker makes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.lazyfs import LazyMount, unavailable_reason
from tests.support.shadow import Shadow

# ---- Shadow against a model (no FUSE needed) -------------------------------------------

_op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 300), st.binary(min_size=1, max_size=80)),
    st.tuples(st.just("truncate"), st.integers(0, 300), st.just(b"")),
    st.tuples(st.just("sync"), st.just(0), st.just(b"")),
)


@settings(max_examples=300, deadline=None)
@given(initial=st.binary(max_size=200), ops=st.lists(_op, max_size=25))
def test_shadow_reads_and_syncs_like_a_plain_file(
    tmp_path_factory: pytest.TempPathFactory, initial: bytes, ops: list[tuple[str, int, bytes]]
) -> None:
    path = tmp_path_factory.mktemp("shadow") / "f"
    path.write_bytes(initial)
    model = bytearray(initial)  # what a reader sees
    synced = bytes(initial)  # what survives a power loss
    shadow: Shadow | None = None
    fd = os.open(path, os.O_RDWR)
    try:
        for kind, offset, data in ops:
            if kind == "sync":
                if shadow is not None:
                    shadow.sync_to(fd)
                    shadow = None
                synced = bytes(model)
                continue
            if shadow is None:
                shadow = Shadow(len(synced))
            if kind == "write":
                if offset > len(model):
                    model.extend(bytes(offset - len(model)))
                model[offset : offset + len(data)] = data
                shadow.write(offset, data)
            else:
                del model[offset:]
                model.extend(bytes(offset - len(model)))
                shadow.truncate(offset)
            assert shadow.size == len(model)
            assert shadow.read(fd, 0, len(model) + 10) == bytes(model)
            assert shadow.read(fd, offset, 17) == bytes(model[offset : offset + 17])
        assert path.read_bytes() == synced  # nothing unsynced reached the file
    finally:
        os.close(fd)


# ---- the mounted file system ------------------------------------------------------------


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[LazyMount]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    lazy = LazyMount(tmp_path / "disk", tmp_path / "mnt", tmp_path / "lazyfs.log")
    lazy.mount()
    try:
        yield lazy
    finally:
        lazy.unmount()


def _append(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_power_loss_keeps_the_fsynced_prefix_only(mount: LazyMount) -> None:
    log = mount.mountpoint / "00000000000000000000.log"
    _append(log, b"acked-and-synced|", sync=True)
    _append(log, b"written-not-synced", sync=False)
    assert log.read_bytes() == b"acked-and-synced|written-not-synced"  # readers see it
    assert log.stat().st_size == 35
    assert (mount.backing / log.name).read_bytes() == b"acked-and-synced|"
    mount.power_loss()
    assert log.read_bytes() == b"acked-and-synced|"


def test_overwrite_and_truncate_are_lost_unless_synced(mount: LazyMount) -> None:
    path = mount.mountpoint / "index"
    _append(path, b"0123456789", sync=True)
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"AB", 4)
        os.ftruncate(fd, 8)
        assert path.read_bytes() == b"0123AB67"
    finally:
        os.close(fd)
    mount.power_loss()
    assert path.read_bytes() == b"0123456789"
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, 3)
        os.fsync(fd)
    finally:
        os.close(fd)
    mount.power_loss()
    assert path.read_bytes() == b"012"


def test_rename_is_durable_at_once_but_an_unsynced_file_renamed_is_empty(
    mount: LazyMount,
) -> None:
    """The namespace survives, data needs fsync: tmp + fsync + rename is safe, a rename
    without the fsync leaves an empty file (what a careless checkpoint would hit)."""
    root = mount.mountpoint
    (root / "dir").mkdir()
    _append(root / "dir" / "careful.tmp", b"hw=41", sync=True)
    os.replace(root / "dir" / "careful.tmp", root / "dir" / "careful")
    _append(root / "dir" / "careless.tmp", b"hw=42", sync=False)
    os.replace(root / "dir" / "careless.tmp", root / "dir" / "careless")
    assert (root / "dir" / "careless").read_bytes() == b"hw=42"
    _append(root / "doomed", b"x", sync=True)
    (root / "doomed").unlink()
    mount.power_loss()
    assert sorted(p.name for p in (root / "dir").iterdir()) == ["careful", "careless"]
    assert (root / "dir" / "careful").read_bytes() == b"hw=41"
    assert (root / "dir" / "careless").read_bytes() == b""
    assert not (root / "doomed").exists()
