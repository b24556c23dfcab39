"""Indago's learned parts: surrogate models of "does the agent fail on this input?" trained on the agent's
own training episodes (Biagiola & Tonella, "Testing of Deep Reinforcement Learning Agents with Surrogate
Models").

One job per module:

* ``encoding``  test inputs <-> feature vectors (min-max scaled numbers, one-hot discrete kinds), and
                feature attributions -> parameter moves (for saliency mutation);
* ``dataset``   reads and checks an interaction log (interaction_log.py), the training-progress filter;
* ``model``     the MLP, the class weights / label-distribution-smoothing weights, one training run;
* ``artifact``  the artifact format (``surrogate.json`` + ``model.pt`` + ``failures.jsonl.gz``), loading it,
                and the runtime ``Surrogate`` (failure scores, saliency);
* ``search``    hill climbing and the genetic algorithm on a surrogate, with random or saliency mutation.

Training a surrogate (the tuning grid, the selection rule, writing the artifact, the held-out and validation
splits) happens before campaigns and lives outside the service, in offline/surrogate_training.py and
offline/surrogate_splits.py (`gauntlet surrogate train`).

Nothing here imports torch at import time (the generator service lists strategies without it): the
modules that need torch or captum import them inside the functions that use them.
"""
