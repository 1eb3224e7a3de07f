"""The predictors: what makes a policy's predictions, one class per family of variant (``variants.py``).

- ``base.py``: the ``Predictor`` every family is (``load`` its fitted state, checked against its record;
  ``predictions`` of a policy on its test days, its validation days and the universe, calibrated; ``provenance``:
  the files that decide them) and the frame code they share (``Predictions``, the test and universe tickers, the
  purge of late labels, the calibration applied);
- ``model.py``: a fine-tuned transformer (torch is imported inside it, when a model predicts);
- ``features.py``: a probe fitted on a features file, and a fixed rule on the same rows;
- ``families.py``: each family's predictor (``predictor(variant)``).

The predictions stage (``stages.predict``) writes what a variant's predictor returns, and the backtests stage hands
it to lineage (``lineage.provenance_frame``), which records its provenance; neither asks which family a variant is.
They sit above the library, beside the stages: a probe's predictor reads its features file (``stages.features``).
"""
