"""Work done before or beside campaigns, not a service: training the models under test (training, qlearning),
measuring them (evaluation), and fitting Indago's surrogates (surrogate_training, surrogate_splits).

These tools run in process. They may import the services' public pieces (simulator_service's runner, subjects,
backends and trace recorder; oracle_service's oracles; agent_service's registry and algorithms;
generator_service's surrogate model, encoding and artifact) so that an offline measurement runs the same
episodes and verdicts a campaign does; no service imports offline/.
"""
