"""A reproduction bundle's files, copied verbatim into every bundle (kvdoctor.consistency.bundle): stand-alone, the
standard library only; nothing of kvdoctor imports them."""
