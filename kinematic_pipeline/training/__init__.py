"""Training (no dagster; torch and Lightning): importers take what they use from its modules, this face imports none.

- ``data.py``: window samples from the store (``SampledWindows``, ``WindowDataModule``);
- ``modules.py``: the LightningModules (``PretrainModule``, ``FinetuneModule``);
- ``trainer.py``: the Lightning Trainer as training runs it;
- ``curves.py``: a run's learning curve and step budget (no torch: the report reads them);
- ``run.py``: the pretrain and finetune entry points (``pretrain``, ``finetune``, ``load_classifier``).
"""
