"""The groups of ``MEMSTREAM_*`` settings, one module per concern; ``memstream.config.Settings``
combines them into the one configuration object (each group is a plain model: the variable names
come from Settings' prefix)."""
