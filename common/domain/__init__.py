"""Pure domain code that both the simulator and the generator need: subjects' validity rules (validators.py) and
search operators (operators.py) as plug-ins, their declarations on the wire (rules.py), and Donkey's track model
(donkey_track.py). No service imports another; both import this."""
