"""The `auto` permission policy's judge: each tool use under `auto` is judged, before anything
runs, by one model call (MANGO_AUTO_PERMISSION_MODEL, else the agent's model) that must answer
with a `submit_judgement` tool use: `allow` runs it, `ask` holds it for the client's
user.tool_confirmation (as always_ask does), `deny` answers it with an error result at once.

A judgement that cannot be reached (the call fails, or its answer is not a judgement) is `ask`
with reason_code `indeterminate`, as the SDK describes it: the client decides. The call's usage
joins the turn's (the session's usage, list cost and budget)."""

import json
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from sessions import events as ev
from sessions import pricing
from sessions.runtime.upstream import ModelError, messages_create

INPUT_MAX_CHARS = 8000  # of the tool input shown to the judge
JUDGE_TOOL = {
    "name": "submit_judgement",
    "description": "Submit your judgement of the tool call.",
    "input_schema": {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": ["allow", "ask", "deny"]},
            "reason": {"type": "string", "description": "One sentence: why."},
        },
        "required": ["decision", "reason"],
    },
}
JUDGE_SYSTEM = (
    "You review one tool call that an autonomous agent is about to make in its sandbox, before it runs,"
    " and decide whether it may run without a human's approval.\n"
    "- allow: routine and reversible work within the agent's task (reading and searching files, running"
    " tests or builds, editing files in its workspace, installing packages).\n"
    "- ask: consequential, irreversible or ambiguous (deleting much data, pushing or publishing, sending"
    " messages, spending money, changing credentials or permissions): a human should approve it.\n"
    "- deny: clearly harmful or high-risk (exfiltrating secrets, destroying data beyond the workspace,"
    " attacking or scanning other systems, evading the sandbox).\n"
    "Answer only by calling submit_judgement."
)
# reason_code values (the SDK's registry is open): "high_risk" for a deny, "needs_approval" for an
# ask the judge chose, "indeterminate" when no judgement was reached.
REASON_CODES = {"deny": "high_risk", "ask": "needs_approval"}


@dataclass(frozen=True)
class Judgement:
    decision: str  # allow | ask | deny
    reason_code: str | None
    usage: dict | None  # the call's addition to the session's usage totals (ev.usage_delta)

    def evaluation(self) -> dict:
        """The tool use's `evaluation` (the SDK's BetaManagedAgentsAgentToolEvaluationAuto)."""
        judged = {"type": self.decision, **({"reason_code": self.reason_code} if self.decision != "allow" else {})}
        return {"type": "auto", "evaluated_permission": judged}


def permission_judge(*, call: Callable[..., dict], model_id: str, tool_name: str, tool_input) -> Judgement:
    """Judge one tool use; `call` runs the upstream request (the runner's interruptible)."""
    model = settings.MANGO_AUTO_PERMISSION_MODEL or model_id
    shown = json.dumps(tool_input, ensure_ascii=False)[:INPUT_MAX_CHARS]
    request = f"The agent calls the tool {tool_name!r} with this input:\n{shown}"
    try:
        response = call(
            lambda: messages_create(
                model=model,
                system=JUDGE_SYSTEM,
                messages=[{"role": "user", "content": request}],
                tools=[JUDGE_TOOL],
                tool_choice={"type": "tool", "name": JUDGE_TOOL["name"]},
                max_tokens=1024,
            )
        )
    except ModelError:
        return Judgement("ask", "indeterminate", None)
    usage = ev.usage_delta(response.get("usage") or {}, pricing.price_for(model))
    for block in response.get("content") or []:
        if block.get("type") == "tool_use" and block.get("name") == JUDGE_TOOL["name"]:
            decision = (block.get("input") or {}).get("decision")
            if decision in ("allow", "ask", "deny"):
                return Judgement(decision, REASON_CODES.get(decision), usage)
    return Judgement("ask", "indeterminate", usage)


def usage_sum(*deltas: dict | None) -> dict | None:
    """Usage additions summed key by key (None when there are none)."""
    present = [delta for delta in deltas if delta]
    if not present:
        return None
    total: dict = {}
    for delta in present:
        for key, value in delta.items():
            total[key] = total.get(key, 0) + value
    return total
