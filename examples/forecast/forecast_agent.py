"""A small weather agent: made-up forecasts that are the same every time, so tests are exact.

Try it by itself with ``mesh dev forecast_agent.py``; serve it over stdio with
``python forecast_agent.py --stdio`` (what ``manifests/forecast.toml`` does).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from mesh import Agent, RequestContext, ToolError, run_agent

agent = Agent(
    "forecast",
    description="Made-up but repeatable weather forecasts.",
    capabilities=["weather"],
)

#: What the climate of each known city starts from (degrees Celsius).
CLIMATE = {"cairo": 28.0, "lisbon": 20.0, "oslo": 8.0, "reykjavik": 4.0}

Days = Annotated[int, msgspec.Meta(ge=1, le=7, description="how many days, 1 to 7")]


class Day(msgspec.Struct, frozen=True, kw_only=True):
    """One day of a forecast."""

    day: int
    sky: Literal["sunny", "cloudy", "rain"]
    high_c: float
    low_c: float


@agent.tool
def cities() -> list[str]:
    """The cities this agent can forecast."""
    return sorted(CLIMATE)


@agent.tool
def forecast(city: str, days: Days, ctx: RequestContext) -> list[Day]:
    """The next ``days`` days in ``city``, reporting progress after each day."""
    base = CLIMATE.get(city.lower())
    if base is None:
        raise ToolError(f"unknown city {city!r}; try one of: {', '.join(sorted(CLIMATE))}")
    report = []
    for day in range(1, days + 1):
        swing = float((len(city) * day) % 5)
        sky: Literal["sunny", "cloudy", "rain"] = (
            "rain" if (len(city) + day) % 3 == 0 else "sunny" if base >= 15 else "cloudy"
        )
        report.append(Day(day=day, sky=sky, high_c=base + swing, low_c=base - 6 + swing / 2))
        ctx.report_progress(day, days, f"day {day} of {days}")
    return report


if __name__ == "__main__":
    run_agent(agent)
