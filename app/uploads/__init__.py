"""Reading uploaded files: formats, text decoding, size-capped ZIP entries."""
