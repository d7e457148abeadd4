"""Drawing a partition timeline: a text table, a self-contained HTML page with an SVG
picture, and a PNG (with matplotlib, when it is installed). PURE except `write_png`.

The picture has one lane per replica broker over time: a thick bar while it leads
(labelled with the leader epoch), a thinner bar while it is in the ISR, a hatched one
while it is in the ELR, a grey line while it is an out-of-sync replica, and a red band
while the broker is fenced. Unclean elections are red triangles, offline spells a red
line across all lanes, and state-change log lines small ticks on their broker's lane.
"""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path

from minikafka_cli.timeline_model import Row, Timeline

COLORS = {
    "leader": "#1f6feb",
    "isr": "#7fb3f5",
    "elr": "#f2b134",
    "replica": "#b0b0b0",
    "fenced": "#e5534b",
}


def _clock(time_ms: int) -> str:
    stamp = datetime.fromtimestamp(time_ms / 1000)
    return stamp.strftime("%H:%M:%S.") + f"{time_ms % 1000:03d}"


def _ids(ids: tuple[int, ...] | None) -> str:
    if ids is None:
        return ""
    return ",".join(map(str, ids)) if ids else "-"


def _leader(row: Row) -> str:
    if row.leader is None:
        return ""
    return "none" if row.leader < 0 else str(row.leader)


def table_lines(timeline: Timeline) -> list[str]:
    """The text table (one row per event, in time order)."""
    header = ["TIME", "OFFSET", "SOURCE", "LEADER", "EPOCH", "ISR"]
    if timeline.has_elr:
        header.append("ELR")
    header += ["STATE", "EVENT"]
    body: list[list[str]] = []
    for row in timeline.rows:
        cells = [
            _clock(row.time_ms) + ("*" if row.replayed else ""),
            "" if row.offset is None else str(row.offset),
            row.source,
            _leader(row),
            "" if row.leader_epoch is None else str(row.leader_epoch),
            _ids(row.isr),
        ]
        if timeline.has_elr:
            cells.append(_ids(row.elr))
        event = ", ".join(row.kinds)
        if row.detail:
            event = f"{event}: {row.detail}" if row.kinds != ("log",) else row.detail
        if row.level and row.level != "INFO":
            event = f"{row.level} {event}"
        cells += [row.state, event]
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for cells in [header, *body]:
        padded = [cell.ljust(width) for cell, width in zip(cells[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, cells[-1]]).rstrip())
    return lines


def render_text(timeline: Timeline) -> str:
    first = datetime.fromtimestamp(timeline.start_ms / 1000).strftime("%Y-%m-%d")
    notes = [
        f"Partition {timeline.topic}-{timeline.partition}, replicas "
        f"{','.join(map(str, timeline.brokers)) or '-'}, from {first} (local time)"
    ]
    if timeline.truncated:
        notes.append(
            "(older history is not kept: the controller's history is bounded and starts "
            "when the controller started)"
        )
    if any(row.replayed for row in timeline.rows):
        notes.append("* replayed when the controller started: the time is the start time")
    return "\n".join([*notes, *table_lines(timeline)]) + "\n"


# ---- SVG / HTML ------------------------------------------------------------------------

LANE_PX = 46
LEFT_PX = 90
WIDTH_PX = 1100
TOP_PX = 30


def _x(timeline: Timeline, time_ms: int) -> float:
    span = max(1, timeline.end_ms - timeline.start_ms)
    return LEFT_PX + (time_ms - timeline.start_ms) / span * (WIDTH_PX - LEFT_PX - 20)


def render_svg(timeline: Timeline) -> str:
    lanes = {broker: index for index, broker in enumerate(timeline.brokers)}
    height = TOP_PX + LANE_PX * max(1, len(lanes)) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" '
        f'fill="{COLORS["elr"]}"/></pattern></defs>',
    ]
    for broker, lane in lanes.items():
        y = TOP_PX + lane * LANE_PX
        out.append(f'<text x="8" y="{y + 22}">broker {broker}</text>')
        out.append(
            f'<line x1="{LEFT_PX}" x2="{WIDTH_PX - 20}" y1="{y + 18}" y2="{y + 18}" stroke="#eee"/>'
        )
    for span in timeline.spans:
        if span.broker not in lanes:
            continue
        y = TOP_PX + lanes[span.broker] * LANE_PX
        x1, x2 = _x(timeline, span.start_ms), _x(timeline, span.end_ms)
        width = max(1.5, x2 - x1)
        title = html.escape(
            f"broker {span.broker}: {span.role} from {_clock(span.start_ms)} to "
            f"{_clock(span.end_ms)}"
            + (f" (leader epoch {span.leader_epoch})" if span.role == "leader" else "")
        )
        if span.role == "fenced":
            out.append(
                f'<rect x="{x1:.1f}" y="{y + 30}" width="{width:.1f}" height="5" '
                f'fill="{COLORS["fenced"]}"><title>{title}</title></rect>'
            )
            continue
        top, bar = {"leader": (6, 24), "isr": (11, 14), "elr": (11, 14)}.get(span.role, (17, 2))
        fill = "url(#hatch)" if span.role == "elr" else COLORS[span.role]
        out.append(
            f'<rect x="{x1:.1f}" y="{y + top}" width="{width:.1f}" height="{bar}" '
            f'fill="{fill}"><title>{title}</title></rect>'
        )
        if span.role == "leader" and width > 24:
            out.append(
                f'<text x="{x1 + 3:.1f}" y="{y + 22}" fill="white">e{span.leader_epoch}</text>'
            )
    bottom = TOP_PX + LANE_PX * max(1, len(lanes))
    for mark in timeline.marks:
        x = _x(timeline, mark.time_ms)
        title = html.escape(f"{_clock(mark.time_ms)} {mark.kind}: {mark.label}")
        if mark.kind == "unclean-election":
            y = TOP_PX + lanes.get(mark.broker, 0) * LANE_PX
            out.append(
                f'<path d="M{x:.1f},{y + 2} l-6,-10 h12 z" fill="{COLORS["fenced"]}">'
                f"<title>{title}</title></path>"
            )
        elif mark.kind == "offline":
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP_PX - 6}" y2="{bottom}" '
                f'stroke="{COLORS["fenced"]}" stroke-dasharray="4 3"><title>{title}</title></line>'
            )
        elif mark.kind == "log" and mark.broker in lanes:
            y = TOP_PX + lanes[mark.broker] * LANE_PX
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y + 36}" y2="{y + 42}" stroke="#444">'
                f"<title>{title}</title></line>"
            )
    out.append(
        f'<text x="{LEFT_PX}" y="{bottom + 20}">{_clock(timeline.start_ms)}</text>'
        f'<text x="{WIDTH_PX - 20}" y="{bottom + 20}" text-anchor="end">'
        f"{_clock(timeline.end_ms)}</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def render_html(timeline: Timeline) -> str:
    """A self-contained page: the picture, a legend and the table."""
    title = f"minikafka timeline: {timeline.topic}-{timeline.partition}"
    legend = " ".join(
        f'<span style="background:{color};padding:0 8px">&nbsp;</span> {html.escape(name)}'
        for name, color in [
            ("leader (eN: leader epoch)", COLORS["leader"]),
            ("in ISR", COLORS["isr"]),
            ("in ELR", COLORS["elr"]),
            ("out-of-sync replica", COLORS["replica"]),
            ("broker fenced / unclean election / offline", COLORS["fenced"]),
        ]
    )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head>\n<body style='font-family:sans-serif'>\n"
        f"<h2>{html.escape(title)}</h2>\n<p>{legend}</p>\n{render_svg(timeline)}\n"
        f"<pre>{html.escape(render_text(timeline))}</pre>\n</body></html>\n"
    )


# ---- PNG (matplotlib) ----------------------------------------------------------------


def matplotlib_missing() -> str | None:
    """Why a PNG cannot be drawn (None: it can)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return (
            "a PNG needs matplotlib, which is not installed (pip install matplotlib); "
            "--output FILE.html needs nothing"
        )
    return None


def write_png(timeline: Timeline, path: Path) -> None:
    """The same picture as `render_svg`, drawn with matplotlib (Agg, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lanes = {broker: index for index, broker in enumerate(timeline.brokers)}
    start = timeline.start_ms
    figure, axes = plt.subplots(figsize=(12, 1.2 + 0.8 * max(1, len(lanes))))
    for span in timeline.spans:
        if span.broker not in lanes:
            continue
        y = lanes[span.broker]
        x = (span.start_ms - start) / 1000
        width = max((span.end_ms - span.start_ms) / 1000, 0.001)
        if span.role == "fenced":
            axes.broken_barh([(x, width)], (y - 0.45, 0.1), color=COLORS["fenced"])
            continue
        height = {"leader": 0.5, "isr": 0.3, "elr": 0.3}.get(span.role, 0.05)
        axes.broken_barh(
            [(x, width)],
            (y - height / 2, height),
            color=COLORS[span.role],
            hatch="//" if span.role == "elr" else None,
        )
        if span.role == "leader":
            axes.text(x, y, f" e{span.leader_epoch}", va="center", color="white", fontsize=8)
    for mark in timeline.marks:
        x = (mark.time_ms - start) / 1000
        if mark.kind == "unclean-election":
            axes.plot([x], [lanes.get(mark.broker, 0) + 0.4], "v", color=COLORS["fenced"])
        elif mark.kind == "offline":
            axes.axvline(x, color=COLORS["fenced"], linestyle="--", linewidth=1)
        elif mark.kind == "log" and mark.broker in lanes:
            axes.plot([x], [lanes[mark.broker] - 0.38], "|", color="#444")
    axes.set_yticks(list(lanes.values()), [f"broker {b}" for b in lanes])
    axes.set_ylim(-0.7, max(0, len(lanes) - 1) + 0.7)
    axes.invert_yaxis()  # the first broker on top, as in the HTML picture
    axes.set_xlabel(f"seconds since {_clock(start)}")
    axes.set_title(f"{timeline.topic}-{timeline.partition}: leader (eN: epoch), ISR, ELR, fenced")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
