"""The kernel IR: typed statements in nested blocks (nodes.py), one `Op` table (ops.py), a verifier, a printer, an
interpreter that defines the semantics (interp.py, the oracle of the tests), and the passes that work on any
IR: simplify, hoisting, local forwarding, slot arrays, thread counts, trip bounds; and a deep stack for walking
deeply nested code (deep_stack.py).

May import: types and errors only. It knows no frontend, transform, target or device."""
