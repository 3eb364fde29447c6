"""One picture of where a live run's load jobs spent their time (issue 37): the jobs of the
``GET /v1/admin/jobs`` export on one lane per worker, each job's stages in their colours
(the serial commits and the idle gaps between jobs show as such), over a slice of the run,
and beside it each stage's share of the workers' time over the whole window."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loader.core.timeline import STAGES, JobTimeline

COLOURS = {
    "dispatch": "#9e9e9e",
    "handoff": "#ffb74d",
    "transport": "#ffe082",
    "prepare": "#80cbc4",
    "spark": "#1976d2",
    "commits": "#e53935",
    "reply": "#8e24aa",
    "idle": "#ffffff",
}


def stage_shares(jobs: Sequence[JobTimeline], start: float, end: float, workers: int) -> dict[str, float]:
    """Each stage's seconds over the window, as a share of the workers' time; ``idle`` the rest."""
    totals = dict.fromkeys(STAGES, 0.0)
    for job in jobs:
        if start <= job.marks["chosen"] and job.marks["reported"] <= end:
            for stage, seconds in job.stages().items():
                totals[stage] += seconds
    capacity = max(1e-9, (end - start) * workers)
    shares = {k: v / capacity for k, v in totals.items()}
    shares["idle"] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def plot_timeline(
    jobs: Sequence[JobTimeline], path: Path, title: str, window: tuple[float, float], span: float = 20.0
) -> dict[str, float]:
    """Write the picture to ``path`` (PNG); returns the stage shares it shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    workers = max((j.worker for j in jobs), default=0) + 1
    w0, w1 = window
    shares = stage_shares(jobs, w0, w1, workers)
    middle = (w0 + w1) / 2
    s0, s1 = middle - span / 2, middle + span / 2
    fig, (lanes, bars) = plt.subplots(
        1, 2, figsize=(13, 1.2 + 0.9 * workers), gridspec_kw={"width_ratios": [5, 1]}, constrained_layout=True
    )
    for job in jobs:
        if job.marks["reported"] < s0 or job.marks["chosen"] > s1:
            continue
        for stage, (a, b, _) in STAGES.items():
            x0, x1 = job.at(a), job.at(b)
            if x0 is None or x1 is None or x1 <= x0:
                continue
            lanes.broken_barh([(x0 - s0, x1 - x0)], (job.worker - 0.4, 0.8), color=COLOURS[stage], lw=0)
        for table in job.tables:  # each commit's end, a tick: the table is visible from here
            if table.commit_end is not None:
                lanes.plot([table.commit_end - s0] * 2, [job.worker - 0.4, job.worker + 0.4], color="black", lw=0.4)
        lanes.text(
            job.marks["chosen"] - s0, job.worker + 0.42, str(len(job.tables)), fontsize=6, va="bottom", clip_on=True
        )
    lanes.set_xlim(0, span)
    lanes.set_ylim(-0.6, workers - 0.4 + 0.3)
    lanes.set_yticks(range(workers), [f"worker {w}" for w in range(workers)])
    lanes.set_xlabel(f"seconds (a {span:g}-s slice from the middle of the window; numbers: tables per job)")
    lanes.set_title(title, fontsize=10)
    bottom = 0.0
    for stage in [*STAGES, "idle"]:
        bars.bar(0, shares[stage], bottom=bottom, color=COLOURS[stage], edgecolor="#555", lw=0.3)
        bottom += shares[stage]
    bars.set_xticks([])
    bars.set_ylim(0, 1)
    bars.set_title("workers' time, whole window", fontsize=9)
    handles = [Patch(facecolor=COLOURS[s], edgecolor="#555", label=s) for s in [*STAGES, "idle"]]
    bars.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return shares


def read_jobs(text: str) -> list[JobTimeline]:
    """The jobs export (JSON Lines) as timelines."""
    import json

    return [JobTimeline.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]


def summary(jobs: Sequence[JobTimeline], window: tuple[float, float]) -> dict[str, Any]:
    """Medians per stage and per table, over the jobs inside the window (for the results)."""
    import statistics

    inside = [j for j in jobs if window[0] <= j.marks["chosen"] and j.marks["reported"] <= window[1]]
    if not inside:
        return {"jobs": 0}
    out: dict[str, Any] = {"jobs": len(inside)}
    out["tables_per_job"] = statistics.median(len(j.tables) for j in inside)
    out["stage_median"] = {
        stage: statistics.median(values)
        for stage in STAGES
        if (values := [j.stages()[stage] for j in inside if stage in j.stages()])
    }
    commits = [
        t.commit_end - t.publish_start
        for j in inside
        for t in j.tables
        if t.commit_end is not None and t.publish_start is not None
    ]
    out["commit_per_table_median"] = statistics.median(commits) if commits else None
    out["service_cpu_per_table_median"] = statistics.median(j.service_cpu / len(j.tables) for j in inside)
    idles = [j.idle_before for j in inside if j.idle_before is not None]
    out["idle_before_median"] = statistics.median(idles) if idles else None
    return out
