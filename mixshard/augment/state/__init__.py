"""`state_dict()` of `Overlay` and `Backgrounds`: what a state holds, and its checks on load."""
