"""PR #102244's spec family, one design per wrapper module: a cfg's model (spec/models.json) ->
the constants reader, the system that runs the reference under them, the spec's actions the
system has steps for, and TLC's step labels that stand for more than one of them.

- MCPR102244.tla: the description's protocol (conformance/pr_system.py PRSystem; its
  CoordinatorCrash and TakeOver are in the actions, not implemented);
- MCPR102244Whole.tla: the description's first INSERT (PRWholeSystem);
- MCPR102244Code.tla: the PR's code (conformance/pr_code_system.py PRCodeSystem).
"""
from __future__ import annotations

from conformance import pr_code_system, pr_system
from conformance.stategraph import wrapper_of

DESIGNS = {
    "MCPR102244.tla": (pr_system.model_constants, pr_system.PRSystem, pr_system.ACTIONS, {}),
    "MCPR102244Whole.tla": (pr_system.whole_constants, pr_system.PRWholeSystem, pr_system.WHOLE_ACTIONS,
                            pr_system.LABELS),
    "MCPR102244Code.tla": (pr_code_system.model_constants, pr_code_system.PRCodeSystem, pr_code_system.ACTIONS, {}),
}


def design(cfg: str) -> tuple:
    """(wrapper module, constants reader, system class, actions, labels) of a PR cfg's model."""
    module = wrapper_of(cfg)
    if module not in DESIGNS:
        raise ValueError(f"{cfg}: not a model of PR #102244's family ({module})")
    return (module, *DESIGNS[module])
