"""The kernel IR: typed statements in nested blocks (nodes.py), one `Op` table (ops.py), a verifier, a printer, an
interpreter that defines the semantics (interp.py, the oracle of the tests), and the passes that work on any
IR: simplify, hoisting, local forwarding, slot arrays, thread counts, trip bounds, batching (sp.vmap); analyses
(uniformity.py: which values are the same for every thread); spvad's math library (libm/: each transcendental
Op expanded into plain arithmetic); and a deep stack for walking deeply nested code (deep_stack.py).

May import: types and errors only. It knows no frontend, transform, target or device."""
