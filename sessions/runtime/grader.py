"""Outcomes (user.define_outcome): after each turn under an active outcome a grader model call
judges the work against the rubric; the agent revises until the grader is satisfied or the
iteration budget is spent (spec "Outcome rubrics").

The rubric text the grader and the agent see is the snapshot admitted with the event
(`private["rubric_text"]`), so deleting a rubric File later changes neither. State lives in the
event log: an outcome's evaluations are its span.outcome_evaluation_start / _end events.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from processors.conversation import grader_transcript
from sessions.events import TERMINAL_RESULTS, EventType
from sessions.models import SessionEvent
from sessions.runtime.upstream import ModelError, messages_create
from sessions.selectors.runner import session_events_since, session_latest_outcome
from sessions.services.events import session_event_append

DEFAULT_MAX_ITERATIONS = 3
# The grader reads the tail of the work when it is longer than this.
TRANSCRIPT_MAX_CHARS = 200_000

GRADER_TOOL = {
    "name": "submit_evaluation",
    "description": "Submit the verdict on whether the agent's work satisfies the rubric.",
    "input_schema": {
        "type": "object",
        "properties": {
            "result": {
                "type": "string",
                "enum": ["satisfied", "needs_revision", "failed"],
                "description": "satisfied: every criterion is met. needs_revision: some are not, and the agent "
                "can fix that. failed: the rubric cannot apply to this work.",
            },
            "explanation": {
                "type": "string",
                "description": "Why; for needs_revision, exactly which criteria are unmet and what is missing.",
            },
        },
        "required": ["result", "explanation"],
    },
}

GRADER_SYSTEM = (
    "You are a strict grader. You receive an outcome description, a rubric and the transcript of an "
    "agent's work. Judge the work against every criterion of the rubric and call submit_evaluation "
    "exactly once."
)


@dataclass
class ActiveOutcome:
    event: SessionEvent
    outcome_id: str
    description: str
    rubric_text: str
    max_iterations: int
    iteration: int  # 0-indexed: the index of the evaluation about to run


def _rubric_text(event: SessionEvent) -> str:
    rubric = event.payload.get("rubric") or {}
    return event.private.get("rubric_text") or rubric.get("content") or ""


def active_outcome(session_id: str) -> ActiveOutcome | None:
    """The latest processed outcome of the session, unless its evaluation has ended."""
    latest = session_latest_outcome(session_id=session_id)
    if latest is None:
        return None
    define, results = latest
    if any(result in TERMINAL_RESULTS for result in results):
        return None
    return ActiveOutcome(
        event=define,
        outcome_id=define.payload["outcome_id"],
        description=define.payload.get("description", ""),
        rubric_text=_rubric_text(define),
        max_iterations=define.payload.get("max_iterations") or DEFAULT_MAX_ITERATIONS,
        iteration=len(results),
    )


def _transcript(session_id: str, since_seq: int) -> str:
    events = session_events_since(session_id=session_id, after_seq=since_seq)
    return grader_transcript(events, max_chars=TRANSCRIPT_MAX_CHARS)


def _grader_request(outcome: ActiveOutcome, transcript: str) -> str:
    return (
        f"<outcome_description>\n{outcome.description}\n</outcome_description>\n\n"
        f"<rubric>\n{outcome.rubric_text}\n</rubric>\n\n"
        f"<agent_work>\n{transcript}\n</agent_work>"
    )


def _verdict(response: dict) -> tuple[str, str]:
    for block in response.get("content") or []:
        if block.get("type") == "tool_use" and block.get("name") == GRADER_TOOL["name"]:
            data = block.get("input") or {}
            result = data.get("result")
            if result in ("satisfied", "needs_revision", "failed"):
                return result, str(data.get("explanation") or "")
    return "failed", "The grader gave no usable verdict."


def _usage(response: dict | None) -> dict:
    usage = (response or {}).get("usage") or {}
    return {
        key: int(usage.get(key) or 0)
        for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    }


def outcome_evaluate(*, session, call: Callable[..., dict]) -> bool:
    """Run one evaluation of the session's active outcome, if any, after the agent ended a turn.
    Returns True when the agent must continue (needs revision, or one final acknowledgement
    turn after max_iterations_reached), False when the session may go idle. `call` runs the
    upstream request (interruptibly); if it raises (an interrupt), the evaluation ends as
    `interrupted` and the exception propagates."""
    outcome = active_outcome(session.id)
    if outcome is None:
        return False
    start = session_event_append(
        session_id=session.id,
        type=EventType.SPAN_OUTCOME_EVALUATION_START,
        payload={"outcome_id": outcome.outcome_id, "iteration": outcome.iteration},
    )

    def end(result: str, explanation: str, usage: dict) -> None:
        session_event_append(
            session_id=session.id,
            type=EventType.SPAN_OUTCOME_EVALUATION_END,
            payload={
                "outcome_id": outcome.outcome_id,
                "outcome_evaluation_start_id": start.id,
                "iteration": outcome.iteration,
                "result": result,
                "explanation": explanation,
                "usage": usage,
            },
        )

    def ongoing() -> None:  # the SDK's heartbeat: evaluating, not stuck
        session_event_append(
            session_id=session.id,
            type=EventType.SPAN_OUTCOME_EVALUATION_ONGOING,
            payload={"outcome_id": outcome.outcome_id, "iteration": outcome.iteration},
        )

    request = _grader_request(outcome, _transcript(session.id, outcome.event.seq))
    try:
        response = call(
            lambda: messages_create(
                model=session.agent_snapshot["model"]["id"],
                system=GRADER_SYSTEM,
                messages=[{"role": "user", "content": request}],
                tools=[GRADER_TOOL],
                tool_choice={"type": "tool", "name": GRADER_TOOL["name"]},
                max_tokens=settings.MANGO_MODEL_MAX_TOKENS,
            ),
            tick=ongoing,
            tick_seconds=settings.MANGO_OUTCOME_HEARTBEAT_SECONDS,
        )
    except ModelError as exc:
        end("failed", f"The grader could not be reached: {exc.message}", _usage(None))
        return False
    except BaseException:
        end("interrupted", "The evaluation was interrupted.", _usage(None))
        raise
    result, explanation = _verdict(response)
    if result == "needs_revision" and outcome.iteration + 1 >= outcome.max_iterations:
        result = "max_iterations_reached"
    end(result, explanation, _usage(response))
    return result in ("needs_revision", "max_iterations_reached")
