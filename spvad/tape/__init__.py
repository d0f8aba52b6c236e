"""Recording for derivatives: `sp.Tape` (reverse mode over launches and host writes), `sp.FwdMode` (forward
mode over a block), custom gradients (`@sp.grad_replaced`, `@sp.grad_for`), and what a Tape keeps to run its
gradients: the entries it records (entries.py), checkpoints (checkpoints.py) in shared slices (kept_slices.py),
plans that let a repeated Tape skip the bookkeeping (plan.py) and the backward pass such a Tape repeats
(planned_backward.py); past a checkpoint_budget, what it records to run its forward again (replay_log.py) and
the backward that does (recompute.py).

May import: the root's shared modules (ndarray, recording, runtime, types, errors) and launch, frontend, ir.
Never imports kernel.py (a launch reaches the Tape through recording.py) nor interop."""
from .controls import no_grad
from .custom_gradients import grad_for, grad_replaced
from .fwdmode import FwdMode
from .tape import Tape, clear_all_gradients

__all__ = ["Tape", "FwdMode", "clear_all_gradients", "grad_for", "grad_replaced", "no_grad"]
