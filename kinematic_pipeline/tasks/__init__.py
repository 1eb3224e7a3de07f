"""The experiment's task axis: what a fine-tuned policy predicts, how it learns it and how its predictions decide.

A ``Task`` (``base.py``) is an object a ``Policy`` holds, as it holds its ``Fold``: its key in the partition key and
the folders, its horizon, its target from the bars, its outputs, its head width, loss and prior, and its decision
rules. ``BuySellHold`` (``buy_sell_hold.py``) is the paper's; its action codes are in ``actions.py`` and its three
decision rules in ``rules.py``; the returns every target is built from are in ``targets.py``. No dagster, and no
torch at import (a loss imports it when it runs).
"""
