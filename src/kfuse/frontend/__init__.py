from .parser import parse_script

__all__ = ["parse_script"]
