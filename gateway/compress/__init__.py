"""Which bytes one prompt becomes: messages to text and back, the budget, the compressor, the route cache.
Keeping a conversation's bytes stable from one request to the next is ``gateway.conversation``."""
