"""Pulumi ComponentResources of the split deployment (one ``XArgs`` each) and the pure helpers
they share (``naming``, ``sizing``); ``program.build`` assembles them."""
