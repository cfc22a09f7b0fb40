"""effkit."""
