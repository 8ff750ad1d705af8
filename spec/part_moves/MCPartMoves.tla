----------------------------- MODULE MCPartMoves -----------------------------
(* Small constants for the models of PartMoves: two shards of two replicas (the code's own *)
(* integration test, test_part_moves_between_shards, runs 2 x 2), one query.              *)
EXTENDS PartMoves, TLC

CONSTANTS s1, s2, s3, d1, d2

MCSource == {s1, s2}
MCSource3 == {s1, s2, s3}   \* a selective source shard: s3 a migration's target
MCDest == {d1, d2}
OneQuery == {"q1"}
NoQueries == {}
=============================================================================
