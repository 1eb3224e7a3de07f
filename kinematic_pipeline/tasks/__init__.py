"""The experiment's task axis: what a fine-tuned policy predicts, how it learns it and how its predictions decide.

A ``Task`` (``base.py``) is an object a ``Policy`` holds, as it holds its ``Fold``: its key in the partition key and
the folders, its horizon, its target from the bars, its outputs, its head width, loss and prior, and its decision
rules. ``BuySellHold`` (``buy_sell_hold.py``) is the paper's; its action codes are in ``actions.py`` and its three
decision rules in ``rules.py``; the returns every target is built from are in ``targets.py``. No dagster, and no
torch at import (a loss imports it when it runs).

A run's tasks come from families (``registry.py``): ``tokenize.tasks`` names them (``("bsh",)``), and
``TASK_FAMILIES`` builds each family's tasks from the settings (Buy/Sell/Hold: one per ``tokenize.taus``);
``Settings.tasks`` is ``run_tasks``. A new family is registered there (``register_family``: a test registers its own).

This face imports nothing: the leaves below the backtest (``actions``, ``targets``) are imported by
``backtest/`` while ``buy_sell_hold`` imports ``backtest/`` back, so a face that imported the tasks would close that
circle for whoever imports a leaf first (``unit/test_house_shape.py`` finds such a circle).
"""
