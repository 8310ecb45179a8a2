// Replaced by the tokenizer and chat-template sources.
