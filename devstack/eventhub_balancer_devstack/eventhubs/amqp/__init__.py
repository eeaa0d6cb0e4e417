"""The AMQP 1.0 codec the emulator speaks: value types, encoding, decoding, frames.

Kept free of I/O so that it can be tested byte by byte, and written for the server side:
it sends the full-length performative lists the azure-eventhub SDK reads by position.
"""
