"""One thin module per outside system: the verbs gpuops needs, typed, errors mapped to
`gpuops.common.errors`. Nothing here knows a feature."""
