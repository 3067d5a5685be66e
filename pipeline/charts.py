"""The report's charts, from its small pandas tables (no Spark here: tests run without it).

``messages_per_minute.png``: messages over storeTimestamp, one panel per broker, a stacked bar
per time bucket. A busy store has more topics than a chart has distinguishable colours, so each
panel shows its ``top`` topics by messages and sums the rest into one ``other (N topics)``
series (:func:`timeline_series`). Why stacked bars: an empty bucket has no bar, so an idle
period shows as a gap (a line would join the buckets either side and draw it as a slow
decline); two topics with identical counts are two segments of one bar, not one line drawn
over the other; and the bar's height is the broker's total. Every series shown has its own
colour; ``other`` is grey.

``lag_per_group.png``: a bar per broker/group, stacked by topic (the same top-N and ``other``).
"""

from __future__ import annotations

import datetime as _dt
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure
    from matplotlib.typing import ColorType

DEFAULT_TOP_SERIES = 8
OTHER_COLOUR = "#7f7f7f"  # tab10's grey: kept for "other", never given to a topic


def other_label(n: int) -> str:
    """The name of the series that sums the ``n`` topics not shown on their own."""
    return f"other ({n} topic{'s' if n != 1 else ''})"


def top_topics(totals: pd.Series, top: int) -> tuple[list[str], list[str]]:
    """``(shown, rest)``: the ``top`` keys of ``totals`` (messages per topic) by value, ties by
    name, and the others (sorted by name). When only one would be left over, it is shown
    itself: an "other (1 topics)" series hides a name for nothing."""
    order = sorted(totals.items(), key=lambda kv: (-kv[1], str(kv[0])))
    names = [str(k) for k, _ in order]
    if len(names) <= top + 1:
        return names, []
    return names[:top], sorted(names[top:])


def timeline_series(
    tl: pd.DataFrame, bucket_ms: int, top: int = DEFAULT_TOP_SERIES
) -> dict[str, pd.DataFrame]:
    """The messages-over-time chart's data, one wide frame per broker.

    ``tl`` has ``brokerName, topic, bucketMs`` (epoch ms, start of a bucket of ``bucket_ms``)
    and ``messages``. Returns ``{brokerName: frame}`` (brokers sorted). Each frame's index is
    every bucket start (UTC ``DatetimeIndex``) from the first to the last bucket of any broker,
    empty buckets included, so the panels share one time axis; its columns are the broker's
    top ``top`` topics by messages (most first, ties by name) and, when more topics are left,
    ``other (N topics)`` with their sum. A bucket where a series has no message is NaN, not 0
    and not interpolated (the chart leaves it empty).
    """
    if not len(tl):
        return {}
    lo, hi = int(tl["bucketMs"].min()), int(tl["bucketMs"].max())
    index = pd.to_datetime(range(lo, hi + bucket_ms, bucket_ms), unit="ms", utc=True)
    out = {}
    for broker, g in tl.groupby("brokerName", sort=True):
        wide = g.pivot_table(index="bucketMs", columns="topic", values="messages", aggfunc="sum")
        shown, rest = top_topics(wide.sum(), top)
        frame = wide[shown].copy() if shown else pd.DataFrame(index=wide.index)
        frame.columns = [str(c) for c in frame.columns]
        if rest:
            # min_count=1: a bucket where none of the rest has a message stays NaN
            frame[other_label(len(rest))] = wide[rest].sum(axis=1, min_count=1)
        frame.index = pd.to_datetime(frame.index, unit="ms", utc=True)
        out[str(broker)] = frame.reindex(index)
    return out


def _palette() -> list[ColorType]:
    import matplotlib

    def listed(name: str) -> list[ColorType]:
        cmap = matplotlib.colormaps[name]
        assert isinstance(cmap, matplotlib.colors.ListedColormap)  # tab10, tab20: listed
        # matplotlib's stub types ``colors`` as ArrayLike | ColorType (any colormap's input);
        # tab10 and tab20 hold a sequence of RGB tuples
        return list(cast("Sequence[ColorType]", cmap.colors))

    tab10 = [c for c in listed("tab10") if matplotlib.colors.to_hex(c) != OTHER_COLOUR]
    light = [
        c
        for i, c in enumerate(listed("tab20"))
        if i % 2 and matplotlib.colors.to_hex(c) != "#c7c7c7"
    ]
    return tab10 + light


def series_styles(names: list[str]) -> list[tuple[ColorType, str | None]]:
    """``(colour, hatch)`` per series name: :func:`series_colours`, and a hatch from the
    first topic whose colour repeats one shown before (more than 18 topics shown)."""
    n = len(_palette())
    out: list[tuple[ColorType, str | None]] = []
    i = 0
    for name, colour in zip(names, series_colours(names)):
        if name.startswith("other ("):
            out.append((colour, None))
        else:
            hatch = ("//", "..", "xx", "\\\\")[(i // n - 1) % 4] if i >= n else None
            out.append((colour, hatch))
            i += 1
    return out


def series_colours(names: list[str]) -> list[ColorType]:
    """A distinct colour for each series name: tab10 without its grey (9), then tab20's light
    shades without grey (9 more); the ``other (...)`` series is grey. Past 18 topics colours
    repeat (:func:`series_styles` then adds hatches)."""
    palette = _palette()
    out: list[ColorType] = []
    i = 0
    for name in names:
        if name.startswith("other ("):
            out.append(OTHER_COLOUR)
        else:
            out.append(palette[i % len(palette)])
            i += 1
    return out


def tick_format(step_s: float, one_day: bool, one_year: bool = True) -> str:
    """The strftime format of time ticks ``step_s`` seconds apart: ``HH:MM:SS.mmm`` (``%f``
    is cut to ms by :func:`format_tick`) below a second, ``HH:MM:SS`` below a minute, ``HH:MM``
    below a day (``MM-DD HH:MM`` when the ticks span more than one day), else ``Nov 25``
    (``YYYY-MM-DD`` across years). The date (or year) the ticks leave out is said once, in
    the axis label (:func:`_time_axis`). Times a person reads: ConciseDateFormatter's
    ``04.830`` (seconds of an unnamed minute) was not one."""
    step_s = round(step_s, 6)  # a second apart in float days is 0.99999...
    if step_s >= 86_400:
        return "%b %d" if one_year else "%Y-%m-%d"
    if step_s >= 60:
        return "%H:%M" if one_day else "%m-%d %H:%M"
    time_fmt = "%H:%M:%S.%f" if step_s < 1 else "%H:%M:%S"
    return time_fmt if one_day else "%m-%d " + time_fmt


def format_tick(when: _dt.datetime, fmt: str) -> str:
    """``when`` with :func:`tick_format`'s ``fmt`` (microseconds cut to milliseconds)."""
    text = when.strftime(fmt)
    return text[:-3] if fmt.endswith("%f") else text


def _time_axis(ax: Axes, lo: _dt.datetime, hi: _dt.datetime, bucket_ms: int) -> str:
    """Time ticks a person reads (:func:`tick_format`); returns what the ticks leave out, for
    the axis label: the date when the axis is within one day, else the year when within one
    year, else ""."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter

    pad = max((hi - lo) * 0.03, _dt.timedelta(milliseconds=bucket_ms))
    # matplotlib's stub takes floats only; set_xlim converts datetimes through the axis's units
    # (matplotlib.dates), as the bars drawn on it are
    ax.set_xlim(lo - pad, hi + pad + _dt.timedelta(milliseconds=bucket_ms))  # type: ignore[arg-type]
    locator = mdates.AutoDateLocator(tz=_dt.UTC, minticks=3, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    left, right = (mdates.num2date(x, tz=_dt.UTC) for x in ax.get_xlim())
    one_day = left.date() == right.date()
    one_year = left.year == right.year

    def label(x: float, _pos: int | None = None) -> str:
        ticks = locator()
        step = min(b - a for a, b in itertools.pairwise(ticks)) * 86_400 if len(ticks) > 1 else 1
        fmt = tick_format(step, one_day, one_year)
        return format_tick(mdates.num2date(x, tz=_dt.UTC), fmt)

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    if one_day:
        return left.strftime("%Y-%m-%d")
    return str(left.year) if one_year else ""


def _no_data(ax: Axes, title: str, what: str) -> None:
    """A chart without data says so, with no axes: 0-1 ticks would mean nothing."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, what, ha="center", va="center", fontsize="large", transform=ax.transAxes)
    ax.set_title(title)


def _thousands(axis: Axis) -> None:
    """Ticks at whole counts only, labelled with thousands separators (a count axis of 2
    had ticks at 0.25, 0.5, ... labelled 0, 0, 0, 1, 1, ...)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos=None: f"{x:,.0f}"))


def plot_timeline(
    tl: pd.DataFrame, bucket_ms: int, unit: str, top: int = DEFAULT_TOP_SERIES
) -> Figure:
    """The messages-over-time figure: one panel (axes) per broker of ``tl``, one when ``tl`` is
    empty. Returns the matplotlib Figure (Agg; the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = timeline_series(tl, bucket_ms, top)
    n = max(len(panels), 1)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.2 + 3.0 * n), sharex=True, squeeze=False)
    axes = axes[:, 0]
    if not panels:
        _no_data(axes[0], f"Messages per {unit} (storeTimestamp, UTC)", "no messages")
        return fig
    width = bucket_ms / 86_400_000  # matplotlib's date unit is the day
    for ax, (broker, frame) in zip(axes, panels.items()):
        names = list(frame.columns)
        bottom = pd.Series(0.0, index=frame.index)
        for name, (colour, hatch) in zip(names, series_styles(names)):
            values = frame[name]
            ax.bar(
                frame.index,
                values.fillna(0),
                width=width,
                bottom=bottom,
                align="edge",
                color=colour,
                hatch=hatch,
                edgecolor=colour if hatch is None else "white",
                linewidth=0,
                label=f"{name} ({int(values.sum()):,})",
            )
            bottom = bottom + values.fillna(0)
        topics = int(tl[tl["brokerName"] == broker]["topic"].nunique())
        ax.set_title(
            f"{broker}: messages per {unit}, {topics} topic"
            f"{'s' if topics != 1 else ''} (storeTimestamp, UTC)",
            fontsize="medium",
        )
        ax.set_ylabel(f"messages / {unit}")
        ax.set_ylim(bottom=0)
        _thousands(ax.yaxis)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(
            fontsize="small",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            title="topic (messages)",
            title_fontsize="small",
            frameon=False,
        )
    first = panels[next(iter(panels))].index
    day = _time_axis(axes[-1], first.min(), first.max(), bucket_ms)
    axes[-1].set_xlabel(
        f"storeTimestamp (UTC{', ' + day if day else ''}); an empty stretch had no messages"
    )
    fig.tight_layout()
    return fig


def plot_lag(lag: pd.DataFrame, top: int = DEFAULT_TOP_SERIES) -> Figure:
    """Consumer lag: a horizontal bar per broker and group, labelled ``brokerName/group`` (one
    broker or several: a reader of the chart alone knows which broker each bar is), stacked by
    topic (the ``top`` topics by lag, the rest as ``other (N topics)``). Returns the Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not len(lag):
        fig, ax = plt.subplots(figsize=(10, 2))
        _no_data(ax, "Consumer lag per broker and group", "no consumer groups")
        return fig
    lag = lag.assign(who=lag["brokerName"].astype(str) + "/" + lag["group"].astype(str))
    pivot = lag.pivot_table(index="who", columns="topic", values="lag", aggfunc="sum", fill_value=0)
    shown, rest = top_topics(pivot.sum(), top)
    wide = pivot[shown].copy()
    if rest:
        wide[other_label(len(rest))] = pivot[rest].sum(axis=1)
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.45 * len(wide)))
    left = pd.Series(0.0, index=wide.index)
    for name, colour in zip(wide.columns, series_colours([str(c) for c in wide.columns])):
        ax.barh(
            wide.index,
            wide[name],
            left=left,
            color=colour,
            label=f"{name} ({int(wide[name].sum()):,})",
        )
        left = left + wide[name]
    ax.invert_yaxis()
    ax.set_xlabel("lag (messages: brokerOffset - consumerOffset)")
    ax.set_ylabel("brokerName/consumer group")
    _thousands(ax.xaxis)
    if not left.any():  # every group caught up: say it, not a bare 0-1 axis
        ax.set_xlim(0, 1)
        ax.set_xticks([0])
        ax.text(
            0.5,
            0.5,
            "no lag: every group has consumed everything",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.legend(
        fontsize="small",
        title="topic (lag)",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    ax.set_title("Consumer lag per broker and group")
    fig.tight_layout()
    return fig
