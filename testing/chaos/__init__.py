"""`epochlog chaos`: scenarios of faults against a real cluster under a recorded workload, judged
by check(), with a report (the history, the verdict, a timeline picture).

- scenarios.py: the scenarios as data and their seeded schedules;
- workload.py: producers and a consumer group in any of the four clients, recorded;
- runner.py: one run from cluster start to verdict;
- report.py: the report folder; live.py: what a terminal shows while it runs;
- cli.py: `epochlog chaos list` and `epochlog chaos run`.
"""
