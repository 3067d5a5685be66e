"""The report's charts and HTML page from pandas tables, without Spark (pipeline/charts.py,
pipeline/htmlreport.py): a busy store's top topics and "other", gaps, colours, one panel per
broker, and a self-contained report.html."""

from __future__ import annotations

import re

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex  # noqa: E402

from rmqfs.pipeline import charts, htmlreport  # noqa: E402

T0 = 1_700_000_000_000


def timeline(rows):
    return pd.DataFrame(rows, columns=["brokerName", "topic", "bucketMs", "messages"])


def busy(brokers=("b1",), topics=18, buckets=10, gap=(4, 6), bucket_ms=1000):
    """``topics`` topics per broker, topic i with i+1 messages per bucket, none in ``gap``."""
    return timeline(
        [
            (b, f"t{i:02d}", T0 + k * bucket_ms, i + 1)
            for b in brokers
            for i in range(topics)
            for k in range(buckets)
            if not gap[0] <= k < gap[1]
        ]
    )


def test_top_topics_and_the_rest_summed_as_other():
    tl = busy(topics=18)
    frame = charts.timeline_series(tl, 1000, top=8)["b1"]
    assert list(frame.columns) == [f"t{i:02d}" for i in range(17, 9, -1)] + ["other (10 topics)"]
    # other is the sum of the 10 smallest: 1 + ... + 10 messages per bucket
    assert frame["other (10 topics)"].dropna().eq(55).all()
    assert frame.sum().sum() == tl["messages"].sum()  # nothing lost


def test_ties_by_name_and_one_left_over_is_shown_itself():
    tl = timeline([("b", t, T0, 5) for t in ("c", "a", "b")] + [("b", "z", T0, 9)])
    assert list(charts.timeline_series(tl, 10, top=2)["b"].columns) == [
        "z",
        "a",
        "other (2 topics)",
    ]
    # 3 topics, top 2: an "other (1 topic)" would hide a name for nothing
    assert list(charts.timeline_series(tl[tl.topic != "c"], 10, top=2)["b"].columns) == [
        "z",
        "a",
        "b",
    ]


def test_empty_buckets_are_missing_not_zero_or_interpolated():
    tl = busy(topics=3, buckets=10, gap=(4, 7))
    frame = charts.timeline_series(tl, 1000, top=8)["b1"]
    assert len(frame) == 10  # every bucket from first to last, the idle ones too
    assert frame.index.to_list() == list(
        pd.to_datetime([T0 + k * 1000 for k in range(10)], unit="ms", utc=True)
    )
    assert frame.iloc[4:7].isna().all().all()
    assert frame.iloc[[0, 3, 7, 9]].notna().all().all()
    # a topic missing from one bucket is NaN there, and "other" with none of the rest too
    tl = timeline(
        [
            ("b", "x", T0, 1),
            ("b", "x", T0 + 20, 1),
            ("b", "y", T0 + 10, 3),
            ("b", "p", T0 + 10, 1),
            ("b", "q", T0 + 10, 1),
        ]
    )
    frame = charts.timeline_series(tl, 10, top=1)["b"]
    assert list(frame.columns) == ["y", "other (3 topics)"]
    assert np.isnan(frame["y"].iloc[0]) and frame["y"].iloc[1] == 3 and np.isnan(frame["y"].iloc[2])
    assert frame["other (3 topics)"].to_list() == [1, 2, 1]


def test_panels_share_one_time_axis():
    tl = pd.concat(
        [
            busy(brokers=("a",), buckets=5, gap=(0, 0)),
            busy(brokers=("b",), buckets=5, gap=(0, 0)).assign(
                bucketMs=lambda d: d.bucketMs + 3000
            ),
        ]
    )
    panels = charts.timeline_series(tl, 1000)
    assert list(panels) == ["a", "b"]
    assert panels["a"].index.equals(panels["b"].index) and len(panels["a"]) == 8


def test_every_series_shown_has_its_own_colour():
    for n in (1, 8, 9, 18):
        names = [f"t{i}" for i in range(n)] + ["other (5 topics)"]
        colours = charts.series_colours(names)
        hexes = [to_hex(c) for c in colours]
        assert len(set(hexes)) == len(hexes), n
        assert hexes[-1] == charts.OTHER_COLOUR and charts.OTHER_COLOUR not in hexes[:-1]
    # past 18 topics colours repeat, but (colour, hatch) does not
    styles = charts.series_styles([f"t{i}" for i in range(30)])
    assert len({(to_hex(c), h) for c, h in styles}) == 30


@pytest.mark.parametrize("brokers", [1, 3])
def test_one_panel_per_broker(brokers):
    import matplotlib.pyplot as plt

    names = [f"broker-{i}" for i in range(brokers)]
    fig = charts.plot_timeline(busy(brokers=names), 1000, "second", top=8)
    try:
        axes = fig.get_axes()
        assert len(axes) == brokers
        for ax, name in zip(axes, names):
            assert ax.get_title().startswith(f"{name}: messages per second, 18 topics")
            labels = [t.get_text() for t in ax.get_legend().get_texts()]
            assert len(labels) == 9 and labels[-1].startswith("other (10 topics)")
            # identical counts stay two segments: every bar segment is its own patch
            assert len(ax.patches) == 9 * 10
    finally:
        plt.close(fig)


def test_empty_timeline_is_one_panel_saying_so():
    import matplotlib.pyplot as plt

    fig = charts.plot_timeline(timeline([]), 1000, "second")
    assert len(fig.get_axes()) == 1
    assert "no messages" in [t.get_text() for t in fig.get_axes()[0].texts]
    assert not fig.get_axes()[0].axison  # no meaningless 0-1 axes
    plt.close(fig)


def test_no_consumer_groups_says_so_without_axes():
    """The lag chart of a store without groups drew 0-1 axes around its note (issue 25)."""
    import matplotlib.pyplot as plt

    empty = pd.DataFrame(columns=["brokerName", "group", "topic", "queueId", "lag"])
    fig = charts.plot_lag(empty)
    ax = fig.get_axes()[0]
    assert [t.get_text() for t in ax.texts] == ["no consumer groups"] and not ax.axison
    plt.close(fig)
    caught_up = pd.DataFrame(
        [{"brokerName": "b", "group": "g", "topic": "t", "queueId": 0, "lag": 0}]
    )
    fig = charts.plot_lag(caught_up)
    assert "no lag: every group has consumed everything" in [
        t.get_text() for t in fig.get_axes()[0].texts
    ]
    plt.close(fig)


def _tick_labels(fig) -> list[str]:
    fig.canvas.draw()
    ax = fig.get_axes()[-1]
    return [t.get_text() for t in ax.get_xticklabels() if t.get_text()]


#: span of the data (ms) -> the tick labels and the axis label's date part. T0 is
#: 2023-11-14 22:13:20 UTC.
SCALES = {
    "burst": (590, r"22:13:(19|20)\.\d{3}", "UTC, 2023-11-14"),
    "seconds": (4_830, r"22:13:2\d", "UTC, 2023-11-14"),
    "minutes": (20 * 60_000, r"22:\d\d", "UTC, 2023-11-14"),
    "hours": (5 * 3_600_000, r"11-1[45] \d\d:\d\d", "UTC, 2023"),
    "weeks": (3 * 7 * 86_400_000, r"(Nov|Dec) \d\d", "UTC, 2023"),
}


@pytest.mark.parametrize("scale", sorted(SCALES))
@pytest.mark.parametrize("topics", [1, 18, 200])
def test_time_ticks_a_person_reads_at_every_scale(scale, topics):
    """Ticks read 22:13:24 (the date once, in the axis label), never ConciseDateFormatter's
    ``04.830``; every scale and topic count draws one bar series per shown topic."""
    import matplotlib.pyplot as plt

    from rmqfs.pipeline.report import chart_bucket

    span, pattern, label = SCALES[scale]
    bucket_ms, unit = chart_bucket(span)
    n = span // bucket_ms + 1
    tl = busy(topics=topics, buckets=n, gap=(n // 3, n // 3 + 1), bucket_ms=bucket_ms)
    fig = charts.plot_timeline(tl, bucket_ms, unit)
    try:
        labels = _tick_labels(fig)
        assert len(labels) >= 3, labels
        assert all(re.fullmatch(pattern, x) for x in labels), (scale, labels)
        assert len(set(labels)) == len(labels), labels  # no two ticks read the same
        ax = fig.get_axes()[-1]
        assert f"(storeTimestamp ({label})" in f"({ax.get_xlabel()}", ax.get_xlabel()
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert len(legend) == min(topics, charts.DEFAULT_TOP_SERIES + 1)
        assert ax.get_yticklabels()  # thousands separated: 12,000
        fig.canvas.draw()
        assert all(
            "," in t.get_text() or float(t.get_text()) < 1000
            for t in ax.get_yticklabels()
            if t.get_text()
        )
    finally:
        plt.close(fig)


def test_count_axes_tick_whole_counts_only():
    """A panel of a few messages, a lag of 2: ticks at 0.25, 0.5, ... read "0, 0, 0, 1, 1"
    (a review); counts tick at whole numbers."""
    import matplotlib.pyplot as plt

    fig = charts.plot_timeline(timeline([("b", "T", T0, 1), ("b", "T", T0 + 10, 2)]), 10, "10 ms")
    fig.canvas.draw()
    lag = pd.DataFrame([{"brokerName": "b", "group": "g", "topic": "T", "queueId": 0, "lag": 2}])
    fig2 = charts.plot_lag(lag)
    fig2.canvas.draw()
    for ticks, labels in (
        (fig.get_axes()[0].get_yticks(), fig.get_axes()[0].get_yticklabels()),
        (fig2.get_axes()[0].get_xticks(), fig2.get_axes()[0].get_xticklabels()),
    ):
        shown = [t for t in ticks if t >= 0]
        assert shown and all(float(t).is_integer() for t in shown), ticks
        texts = [x.get_text() for x in labels if x.get_text()]
        assert len(texts) == len(set(texts)), texts
    plt.close(fig)
    plt.close(fig2)


def test_lag_chart_groups_topics_the_same_way():
    import matplotlib.pyplot as plt

    lag = pd.DataFrame(
        [
            {"brokerName": "b", "group": f"g{g}", "topic": f"t{t:02d}", "queueId": 0, "lag": t + 1}
            for g in range(2)
            for t in range(12)
        ]
    )
    fig = charts.plot_lag(lag, top=8)
    labels = [t.get_text() for t in fig.get_axes()[0].get_legend().get_texts()]
    assert labels[-1] == "other (4 topics) (20)" and len(labels) == 9  # (their lag)
    plt.close(fig)


def test_lag_chart_names_the_broker_of_each_bar():
    """With one broker too (issue 35: its bars read only the group's name, so a chart of one
    store's report did not say whose groups they were)."""
    import matplotlib.pyplot as plt

    for brokers in (["broker-a"], ["broker-a", "broker-b"]):
        lag = pd.DataFrame(
            [
                {"brokerName": b, "group": g, "topic": "t", "queueId": 0, "lag": 5}
                for b in brokers
                for g in ("orders", "audit")
            ]
        )
        fig = charts.plot_lag(lag)
        fig.canvas.draw()
        ax = fig.get_axes()[0]
        bars = {t.get_text() for t in ax.get_yticklabels()}
        assert bars == {f"{b}/{g}" for b in brokers for g in ("orders", "audit")}, bars
        assert ax.get_ylabel() == "brokerName/consumer group"
        plt.close(fig)


def tables():
    return {
        "per_minute": pd.DataFrame(
            {
                "brokerName": ["b"],
                "topic": ["<script>x</script>"],
                "minute": pd.to_datetime([T0], unit="ms", utc=True),
                "messages": [1234567],
            }
        ),
        "store_latency": pd.DataFrame(
            {
                "brokerName": ["b", "b"],
                "topic": ["mounted", "clients"],
                "measurable": [False, True],
                "messages": [10, 10],
                "p50": [np.nan, 3.0],
                "p95": [np.nan, 5.0],
                "p99": [np.nan, 7.5],
                "max": pd.array([None, 9], dtype="Int64"),
                "note": ["not measurable: bornTimestamp equals storeTimestamp", None],
            }
        ),
        "top_keys": pd.DataFrame({"topic": [], "key": [], "messages": []}),
    }


def test_html_is_one_self_contained_file_with_every_table(tmp_path):
    import matplotlib.pyplot as plt

    fig = charts.plot_timeline(busy(), 1000, "second")
    png = tmp_path / "chart.png"
    fig.savefig(png)
    plt.close(fig)
    t = tables()
    path = htmlreport.write(t, list(t), "1 message & more", [str(png)], str(tmp_path))
    with open(path, encoding="utf-8") as f:
        page = f.read()
    assert page.startswith("<!DOCTYPE html>")
    # every resource is inline: the only src= are data: URIs, no link to anywhere
    srcs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
    assert srcs and all(s.startswith(("data:image/png;base64,", "#")) for s in srcs), srcs
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page  # escaped
    for name in t:
        assert f'<h2 id="{name}">{name}</h2>' in page
    assert "1,234,567" in page and "1 message &amp; more" in page
    assert "Latency is not measurable for 1 of 2 topic(s)" in page
    text = re.sub(r'src="data:[^"]*"', "", page)  # base64 may spell anything
    assert "None" not in text and "nan" not in text.lower() and "&lt;NA&gt;" not in text
