"""`posttrain experiment`: a pre-registered plan in, a verdict out.

    plan.py    the plan file: start, arms and seeds, controls, test set, hypotheses, decision rule
    power.py   the items a plan needs for power 0.8 under its own decision rule
    lock.py    hashes of the plan, its recipes and its test set, and the commit, written before any arm runs
    stages.py  the posttrain commands a plan runs: kept when finished, resumed when killed, in lanes
    tables.py  every table and the verdict, rebuilt from the kept per-item answers alone

The statistics never overstate: a single model enters a pooled test once, a hypothesis over seeds holds
only when each of its tests does (an intersection-union test), and Holm corrects across hypotheses when
the plan asks. Guide: `posttrain docs experiments`.
"""
