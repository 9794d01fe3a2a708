"""Asking a person before a change: the request and its wait (request.py), its Slack Block
Kit message (block_kit.py), its record on the Prefect server (record.py), and the log
filter that keeps a suspended wait from reading as an error (suspension_log.py)."""
