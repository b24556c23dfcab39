"""Oracle service: verdicts, margins and behaviour descriptors from recorded episodes."""
