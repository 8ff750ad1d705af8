"""The lab: instruments that measure the project (mutation testing, benchmarks, the teeth and
switch tables, the fault matrix). Nothing in the product imports it."""
