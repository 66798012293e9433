"""arenad: a real-time skill-rating daemon for free-for-all arena game servers."""

__version__ = "0.1.0"
