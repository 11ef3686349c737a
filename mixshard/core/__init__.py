"""What both sides share: the manifest format, constants, errors, file and environment helpers."""
