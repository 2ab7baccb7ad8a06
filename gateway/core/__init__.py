"""What happens to a chat call: the chat service, Self-Route and the model's token count."""
