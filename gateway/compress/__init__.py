"""Which bytes are sent: messages to text and back, the budget, the compressor, multi-turn prefixes,
the route cache."""
