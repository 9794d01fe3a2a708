"""Server-side apply and managed fields, as kube-apiserver's field manager and
structured-merge-diff keep them.

`fieldset` is the set of field paths a manager owns (and its FieldsV1 form), `schema` reads
what a kind's OpenAPI schema says about merging (atomic or granular, list keys), `typed` walks
objects with it (the set of an object, the difference of two, the merge of an applied
configuration), `updater` decides ownership, conflicts and what an applier stopped applying,
`entries` turns it into `metadata.managedFields`. All pure: plain dicts in and out, the time a
parameter. `handler.py` is the HTTP side.
"""
