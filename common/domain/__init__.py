"""Pure domain code that both the simulator and the generator need: subjects' validity rules (validators.py) and
search operators (operators.py) as plug-ins and their declarations on the wire (rules.py). A subject's own rules
and operators (e.g. Donkey's track grammar) live in its pack (subjects/<family>/). No service imports another;
both import this."""
