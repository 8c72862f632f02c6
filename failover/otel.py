"""OpenTelemetry traces and metrics as an observer of one failover's calls (the ``[otel]`` extra).

`OpenTelemetry` holds the tracer and meter (the global providers unless given);
`OtelObserver` turns each fact of the event stream (`failover.events`) into a span: one per
upstream call (``failover.call``) and one per recovery read (``failover.recover``), with the
failover's name, the outcome, the cause, the stale age and the breaker state as attributes; a
guard's refusal is an event of the call's span naming the guard (``failover.guard``), and is
counted in ``failover.refused`` by guard. The library's counters
are OTel metrics too, for those who do not use Prometheus. The events come after the fact, so a
span's start is its end less the time the core measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from .errors import ConfigurationError, refused_by
from .events import Observer
from .health import BREAKER_STATES
from .stores.base import Payload

__all__ = ["OpenTelemetry", "OtelObserver", "resolve_opentelemetry"]

SCOPE = "failover"


class OpenTelemetry:
    """Where a `failover.Failover` sends its spans and metrics (``Failover(opentelemetry=...)``).

    Args:
        tracer_provider: the OTel ``TracerProvider``; ``None``: the global one.
        meter_provider: the OTel ``MeterProvider``; ``None``: the global one.

    Raises:
        ConfigurationError: ``opentelemetry-api`` is not installed (``pip install failover[otel]``).
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        try:
            from opentelemetry import metrics, trace
        except ImportError as e:
            raise ConfigurationError(
                "Failover: opentelemetry needs opentelemetry-api (pip install 'failover[otel]')"
            ) from e
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.calls = meter.create_counter(
            "failover.calls", unit="{call}", description="Calls by failover and outcome"
        )
        self.upstream = meter.create_histogram(
            "failover.upstream.duration", unit="s", description="Time of the upstream calls"
        )
        self.stale_age = meter.create_histogram(
            "failover.stale.age", unit="s", description="Age of the values recovered"
        )
        self.refused = meter.create_counter(
            "failover.refused", unit="{call}", description="Calls a guard refused, by guard"
        )
        self.writes = meter.create_counter(
            "failover.store.writes", unit="{write}", description="Live results written or failed"
        )
        self.error = trace.StatusCode.ERROR

    def __repr__(self) -> str:
        return "OpenTelemetry()"

    def observer(self, name: str, clock: Callable[[], datetime]) -> OtelObserver:
        """The observer of failover ``name``."""
        return OtelObserver(self, name, clock)


def resolve_opentelemetry(value: object) -> OpenTelemetry | None:
    """``False``/``None``: off; ``True``: the global providers; an `OpenTelemetry`: itself.

    Raises:
        ConfigurationError: anything else, or ``True`` without opentelemetry-api installed.
    """
    if value is None or value is False:
        return None
    if value is True:
        return OpenTelemetry()
    if isinstance(value, OpenTelemetry):
        return value
    raise ConfigurationError(
        f"Failover: opentelemetry must be a bool or an OpenTelemetry, got {value!r}"
    )


class OtelObserver(Observer):
    """One failover's spans and OTel metrics.

    Args:
        otel: the tracer and instruments.
        name: the failover's name.
        clock: the engine's clock (the stale age of a recovered value).

    Attributes:
        breaker: the state of the failover's breaker, from the stream's `breaker_state`
            (``None`` without one): each call's ``failover.breaker.state``.
    """

    __slots__ = ("breaker", "clock", "name", "otel")

    timed: ClassVar[bool] = True

    def __init__(
        self,
        otel: OpenTelemetry,
        name: str,
        clock: Callable[[], datetime],
    ) -> None:
        self.otel = otel
        self.name = name
        self.clock = clock
        self.breaker: str | None = None

    def __repr__(self) -> str:
        return f"OtelObserver({self.name!r})"

    def _call(
        self,
        outcome: str,
        seconds: float | None,
        cause: Exception | None = None,
        age: float | None = None,
        upstream: bool = True,
    ) -> None:
        attributes: dict[str, Any] = {"failover.name": self.name, "failover.outcome": outcome}
        if cause is not None:
            attributes["failover.cause"] = type(cause).__qualname__
        if age is not None:
            attributes["failover.stale_age_s"] = age
        state = self.breaker
        if state is not None:
            attributes["failover.breaker.state"] = state
        guard = None if cause is None else refused_by(cause)
        if guard is not None:
            attributes["failover.guard"] = guard
        end = time.time_ns()
        start = end - int((seconds or 0.0) * 1e9)
        span = self.otel.tracer.start_span("failover.call", start_time=start, attributes=attributes)
        if guard is not None:  # a guard's refusal: the upstream not called, or not waited for
            span.add_event(
                "failover.guard_refused", {"failover.name": self.name, "failover.guard": guard}
            )
        if cause is not None:
            span.set_status(self.otel.error, type(cause).__qualname__)
        span.end(end_time=end)
        self.otel.calls.add(1, {"failover.name": self.name, "failover.outcome": outcome})
        if seconds is not None and upstream:
            self.otel.upstream.record(seconds, {"failover.name": self.name})

    def _age(self, as_of: datetime | None) -> float | None:
        if as_of is None:
            return None
        return max(0.0, (self.clock() - as_of).total_seconds())

    def breaker_state(self, state: int) -> None:
        """Keep the breaker's state for the spans of the next calls."""
        self.breaker = BREAKER_STATES[state] if 0 <= state < len(BREAKER_STATES) else None

    def refused(self, guard: str, cause: Exception) -> None:
        """Count a guard's refusal in ``failover.refused`` (its span is the call's)."""
        self.otel.refused.add(1, {"failover.name": self.name, "failover.guard": guard})

    def live(self, now: datetime | None, seconds: float) -> None:
        """A ``failover.call`` span, outcome ``live``."""
        self._call("live", seconds)

    def fresh(self, now: datetime | None) -> None:
        """A ``failover.call`` span, outcome ``fresh`` (served within ``fresh_for``): the
        upstream was not called, so no upstream duration is recorded."""
        self._call("fresh", 0.0, upstream=False)

    def recovered(self, seconds: float | None, cause: Exception, as_of: datetime | None) -> None:
        """A ``failover.call`` span, outcome ``recovered``, with the stale age."""
        age = self._age(as_of)
        self._call("recovered", seconds, cause, age)
        if age is not None:
            self.otel.stale_age.record(age, {"failover.name": self.name})

    def not_recovered(self, seconds: float | None, cause: Exception) -> None:
        """A ``failover.call`` span, outcome ``not_recovered``."""
        self._call("not_recovered", seconds, cause)

    def raised(self, seconds: float, cause: Exception) -> None:
        """A ``failover.call`` span, outcome ``raised``."""
        self._call("raised", seconds, cause)

    def read(self, outcome: str, seconds: float, found: Payload | None) -> None:
        """A ``failover.recover`` span: the store read for a recovery (``failover.partial``
        when it found only some of a scatter/gather call's slices)."""
        age = self._age(found.as_of) if found is not None else None
        attributes: dict[str, Any] = {"failover.name": self.name, "failover.outcome": outcome}
        if age is not None:
            attributes["failover.stale_age_s"] = age
        if found is not None and found.partial:  # some slices of a scatter/gather call only
            attributes["failover.partial"] = True
        end = time.time_ns()
        span = self.otel.tracer.start_span(
            "failover.recover", start_time=end - int(seconds * 1e9), attributes=attributes
        )
        span.end(end_time=end)

    def stored(self, ok: bool, seconds: float) -> None:
        """Count a write of a live result."""
        self.otel.writes.add(
            1, {"failover.name": self.name, "failover.result": "stored" if ok else "failed"}
        )

    def superseded(self, count: int) -> None:
        """Count the entries of a write a newer stored entry kept out."""
        self.otel.writes.add(count, {"failover.name": self.name, "failover.result": "superseded"})
