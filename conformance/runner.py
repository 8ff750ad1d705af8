"""Running a Hypothesis state machine as the conformance stages and the lab do: a result, never a
raise, with the failing sequence as Hypothesis prints it (one `state.<Action>(...)` line a step)."""

from __future__ import annotations

import time

from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test


def run_machine(machine, prof: settings, shrink: bool) -> dict:
    """Run a state machine; on failure the sequence Hypothesis reports (shrunk when `shrink`)."""
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)
    t0 = time.perf_counter()
    try:
        run_state_machine_as_test(machine, settings=settings(prof, phases=phases, print_blob=False))
    except BaseException as e:  # noqa: BLE001 - a failing run is the result
        if isinstance(e, KeyboardInterrupt):
            raise
        notes = "\n".join(getattr(e, "__notes__", []))
        # The failing sequence as Hypothesis prints it: one `state.<Action>(...)` line per step,
        # each preceded by the instance it took (a note); invariant checks left out.
        lines = [x for x in notes.splitlines() if x and not x.endswith(("Inv()", "Prop()", "Invariants()"))
                 and not x.startswith(("Explanation", " "))]
        # Steps are the spec's actions: not the teardown, the machine's schedule or swarm draw or
        # its stutters once nothing can run. A machine with one rule, Step, notes the action and
        # instance it took just before Hypothesis prints the rule: that note is the step, and a
        # Step with no note before it stuttered.
        steps = []
        for before, x in zip([""] + lines, lines):
            if x.startswith("state.Step("):
                if before and not before.startswith("state."):
                    steps.append(before)
            elif x.startswith("state.") and not x.startswith(("state.teardown", "state.schedule", "state.swarm",
                                                              "state.Stutter")):
                steps.append(x)
        first = e.exceptions[0] if isinstance(e, BaseExceptionGroup) else e
        return {"failed": True, "error": f"{type(first).__name__}: {str(first)[:200]}", "steps": steps, "sequence": lines,
                "seconds": round(time.perf_counter() - t0, 1)}
    return {"failed": False, "seconds": round(time.perf_counter() - t0, 1)}
