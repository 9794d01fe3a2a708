"""GPU rebalance, the pure part (issue 17): measure stranded and fragmented GPUs, predict
where pods land, plan which running pods move where so Pending GPU pods fit.

Pure: the standard library, numpy, cvxpy and gpuops.common only — no cluster, no I/O.
`model` is the input, `fragmentation` the measures, `placement` the scheduler policies,
`repack` the planner.
"""
