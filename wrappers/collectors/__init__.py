"""Where env episodes run: the collector protocol, in-process threads, Ray actors."""
