"""What SRC holds: a folder or a tar / zip archive listed once (members read in place, nothing
extracted), the images found in it and their classes; which bytes can be images. No pixels."""
