"""`minikafka timeline`: one partition's leaders, leader epochs, ISR (and ELR), unclean
elections and fencing over time, as a text table and a picture.

The history comes from the controller (`DescribePartitionHistory`, through any broker);
`--log FILE` adds the state-change lines that brokers (and the controller) logged about
the partition. `write_timeline` is also what the fault suite calls to attach one
timeline per partition of a failing scenario.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import click
import msgspec

from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    bootstrap_option,
    client_security,
    config_file_option,
    fail,
)
from minikafka_cli.timeline_model import Row, Timeline, build_timeline, log_rows
from minikafka_cli.timeline_render import matplotlib_missing, render_html, render_text, write_png

OUTPUT_SUFFIXES = (".png", ".html", ".htm", ".svg", ".txt")


def read_log_rows(paths: Sequence[Path], topic: str, partition: int) -> list[Row]:
    rows: list[Row] = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as file:
            rows.extend(log_rows(file, topic, partition, source=path.name))
    return rows


def write_timeline(timeline: Timeline, output: Path) -> None:
    """Write the picture (or the table, for .txt) in the format the suffix names."""
    suffix = output.suffix.lower()
    if suffix == ".png":
        problem = matplotlib_missing()
        if problem is not None:
            raise click.ClickException(problem)
        write_png(timeline, output)
    elif suffix in (".html", ".htm"):
        output.write_text(render_html(timeline), encoding="utf-8")
    elif suffix == ".svg":
        from minikafka_cli.timeline_render import render_svg

        output.write_text(render_svg(timeline) + "\n", encoding="utf-8")
    else:
        output.write_text(render_text(timeline), encoding="utf-8")


def _check_output(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if path.suffix.lower() not in OUTPUT_SUFFIXES:
        raise click.BadParameter(
            f"{value!r}: the file name must end in {', '.join(OUTPUT_SUFFIXES)} (the format)",
            ctx=ctx,
            param=param,
        )
    return path


@click.command("timeline", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option("--topic", "topic_name", required=True, metavar="NAME")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option(
    "--output",
    metavar="FILE",
    callback=_check_output,
    help="Also draw the timeline into FILE: .png (needs matplotlib), .html (a page with an "
    "SVG picture and the table), .svg, or .txt (the table).",
)
@click.option(
    "--log",
    "log_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A broker's (or the controller's) log file: its state-change lines about the "
    "partition are added (repeatable).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the rows as JSON lines (time_ms, offset, source, kinds, detail, leader, "
    "leader_epoch, isr, elr, state, replayed, level) instead of the table.",
)
def timeline(
    bootstrap_server: str,
    topic_name: str,
    partition: int,
    output: Path | None,
    log_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Show a partition's history: leaders, leader epochs, ISR (and ELR), unclean
    elections and fencing over time.

    Prints a table (TIME, metadata OFFSET, SOURCE, LEADER, EPOCH, ISR, STATE, EVENT) from
    the controller's history, which is kept in memory (bounded) since the controller
    started; rows marked * were replayed at its start.
    """
    from client import Admin

    if output is not None and output.suffix.lower() == ".png":
        problem = matplotlib_missing()
        if problem is not None:
            fail(problem)
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        history = admin.describe_partition_history(topic_name, partition)
    extra = read_log_rows(list(log_files), topic_name, partition)
    built = build_timeline(history, extra, now_ms=time.time_ns() // 1_000_000)
    if as_json:
        for row in built.rows:
            click.echo(msgspec.json.encode(row).decode())
    else:
        click.echo(render_text(built), nl=False)
    if output is not None:
        write_timeline(built, output)
        click.echo(f"Wrote {output}", err=True)
