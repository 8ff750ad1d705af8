---- MODULE UnknownOperator ----
VARIABLE x
Init == x = undefinedThing
Next == x' = x
====
