---- MODULE SyntaxError ----
VARIABLE x
Init == x =
Next == x' = x
====
