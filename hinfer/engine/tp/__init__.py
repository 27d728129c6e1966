"""Tensor parallelism: one process per rank, rank 0 the engine, the others following its steps.

group.py joins the ranks (torch.distributed) and carries rank 0's commands; load.py builds one rank's shard of
the model from slices of the checkpoint; leader.py is rank 0's side (it starts the others, and its state and
runner send each change and step to them); follower.py is the other ranks' loop. docs/tensor-parallel.md.
"""
