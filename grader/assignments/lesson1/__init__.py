"""Lesson 1 - measure first: a throughput meter, the data-wait share, the bottleneck's name.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
