"""Subject packs: one package per subject family (subjects/<family>/).

A pack holds the family's subject YAML files, its env or backend, injector, oracles (with the signals they read),
validity rules and search operators, and example campaigns, and declares each part as an entry point of the service
role that runs it (common/plugins.py ``ROLE_GROUPS``). No service imports a pack: services load its parts by name,
through the entry points. A pack's modules import only ``common`` and third-party libraries, plus the plug-in surface
of the one service that loads them (``simulator_service.plugin_api`` for a backend or an injector,
``oracle_service.plugin_api`` for an oracle); docs/development/plugins.md says how to write one.
"""
