"""A stand-in for what the PyTorch cases hand their torch-free assembly code (torch.compile,
DistributedDataParallel, fully_shard), for the unit tests of that code."""


class Recorder:
    """Fakes of torch.compile, DistributedDataParallel and fully_shard that note what each is given, in
    order; compile and wrap hand back a tagged stand-in of what they were given."""

    def __init__(self):
        self.calls = []

    def compile(self, module):
        self.calls.append(("compile", module))
        return ("compiled", module)

    def wrap(self, module):
        self.calls.append(("ddp", module))
        return ("ddp", module)

    def shard(self, module):
        self.calls.append(("shard", module))
