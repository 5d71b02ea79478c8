"""pytorch-gpt: a GPT-2-style decoder (gpt.py) trained with DistributedDataParallel (--parallel ddp) or
FSDP2 (--parallel fsdp: fully_shard on every block, then on the whole model), measured in tokens/s.

One process per device, started by torchrun, by the suite (--launcher ranks) or by a bare srun (see
cases/_shared/torch_dist.py). --data synthetic trains on a fixed batch of random tokens on the device;
--data tokens on windows of $SUITE_DATA_DIR/tokens/train.bin (cases/_shared/token_windows.py), each rank its
own. A step is --grad-accum micro-batches, the gradients exchanged once; steps are timed in iterations of
--num-batches-per-iter, after --num-warmup-batches untimed ones. The order of compilation and wrapping and the
garbage collector's settings: assembly.py; the optimizer's implementation: cases/_shared/ddp_assembly.py. On
GPUs the GPU's own time for a step's passes is measured after the timed window (cases/_shared/gpu_busy.py).
Options come from case.toml."""

import contextlib
import functools
import time

import assembly
import numpy
import torch
import torch.distributed as dist
from gpt import GPT, N_CONVENTION, GPTConfig, WithLoss, next_token_loss, parameters_counted, training_flops_per_token
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from cases._shared import ddp_assembly
from cases._shared.flops import precision, report_peak, training_flops_per_sample
from cases._shared.gpu_busy import SPINS_S, pass_gpu_seconds
from cases._shared.memory import peak_memory
from cases._shared.timed import min_seconds, timed_iterations
from cases._shared.token_windows import TokenError, data_facts, open_windows
from cases._shared.torch_dist import agree, leave_process_group, pick_backend, pick_device, place
from suite.instack.case_options import parse_case_args
from suite.instack.probe import Probe, announce
from suite.instack.process_end import end_process

CASE = "pytorch-gpt"
FIRST_LOSSES = 20  # steps whose loss the record lists one by one
GPT2_SMALL = GPTConfig()


def model_config(args) -> GPTConfig:
    try:
        return GPTConfig(args.layers, args.heads, args.width, args.context, args.vocab_size)
    except ValueError as exc:
        raise SystemExit(f"{CASE}: {exc}") from None


def model_name(config: GPTConfig) -> str:
    return "gpt2-small" if config == GPT2_SMALL else f"gpt-{config.layers}l-{config.heads}h-{config.width}w"


def amp_dtype(args, device: torch.device) -> torch.dtype | None:
    """bfloat16 autocast on GPUs (--precision auto), float32 on CPUs; --precision says otherwise."""
    wanted = args.precision if args.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    return torch.bfloat16 if wanted == "bf16" else None


def parallel(args, bare: GPT, device: torch.device, world: int, amp: torch.dtype | None):
    """(the module a step calls with (inputs, targets) for their loss, the module whose gradient exchange
    gradient_sync switches or None, its settings as the record shows them), compiled under --compile."""
    if args.parallel == "ddp":
        return with_ddp(args, bare, device, world)
    return with_fsdp(args, bare, device, world, amp)


def compiler(args):
    """torch.compile at --compile-mode, or None without --compile."""
    return functools.partial(torch.compile, mode=args.compile_mode) if args.compile else None


def with_ddp(args, bare: GPT, device: torch.device, world: int):
    def wrap(module):
        return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                       bucket_cap_mb=args.bucket_cap_mb)

    model, wrapped = assembly.ddp_model(WithLoss(bare), world, compiler(args), wrap)
    return model, wrapped, assembly.ddp_settings(args.bucket_cap_mb, world)


def with_fsdp(args, bare: GPT, device: torch.device, world: int, amp: torch.dtype | None):
    mesh = init_device_mesh(device.type, (world,))
    # Parameters gathered in bfloat16 under bf16, gradients reduced in float32 (as torchtitan does).
    policy = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32) if amp else MixedPrecisionPolicy()
    reshard = assembly.reshard_after_forward(args.keep_gathered, world)
    shard = functools.partial(fully_shard, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    compile_fn = compiler(args)
    sharded = assembly.shard_blocks(bare, bare.blocks, shard, compile_fn)
    loss = compile_fn(next_token_loss) if compile_fn else next_token_loss
    settings = assembly.fsdp_settings(str(amp or torch.float32).removeprefix("torch."), reshard, sharded, world)
    return WithLoss(bare, loss), bare, settings


def make_optimizer(args, bare: GPT, device: torch.device):
    """AdamW in --optimizer-impl's implementation, and the implementation's name."""
    implementation = ddp_assembly.optimizer_implementation(args.optimizer_impl, device.type)
    optimizer = torch.optim.AdamW(bare.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                  **ddp_assembly.optimizer_flags(implementation))
    return optimizer, implementation


def gradient_sync(wrapped, on: bool):
    """A context in which backward passes exchange gradients (on) or keep them local (off: the
    micro-batches of a step before its last); an unwrapped model (a world of one) exchanges nothing."""
    if isinstance(wrapped, DistributedDataParallel):
        return contextlib.nullcontext() if on else wrapped.no_sync()
    if isinstance(wrapped, FSDPModule):
        wrapped.set_requires_gradient_sync(on)
    return contextlib.nullcontext()


def micro_step(model, device: torch.device, amp: torch.dtype | None, accum: int):
    """A function of (inputs, targets): one micro-batch's forward and backward pass; its loss, detached."""
    autocast = functools.partial(torch.autocast, device.type, dtype=amp) if amp else contextlib.nullcontext

    def run(inputs, targets):
        with autocast():
            loss = model(inputs, targets)
        if accum > 1:
            loss = loss / accum
        loss.backward()
        return loss.detach()

    return run


def make_step(args, model, wrapped, optimizer, device, amp):
    """One optimizer step over --grad-accum micro-batches from `next_batch`; its loss (detached). A step
    of one micro-batch adds one copy to its pass (no loss buffer, division or exchange switch)."""
    accum, micro = args.grad_accum, micro_step(model, device, amp, args.grad_accum)

    def step(next_batch):
        if accum == 1:
            # A copy: a step compiled with CUDA graphs returns its loss in the graph's memory, which the
            # next step overwrites.
            total = micro(*next_batch()).clone()
        else:
            parts = []
            for index in range(accum):
                with gradient_sync(wrapped, index == accum - 1):
                    parts.append(micro(*next_batch()))
            total = torch.stack(parts).sum()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def gpu_pass_seconds(args, model, wrapped, optimizer, device, amp, next_batch, world: int) -> float | None:
    """The GPU's own time for a step's forward and backward passes (every micro-batch, one batch again),
    the exchange switched off (DDP's no_sync, FSDP2's set_requires_gradient_sync) and the update left
    out, gradients dropped: beside the timed step, how much of it the GPU works (the diagnosis). One
    pass runs untimed first, so that nothing is compiled or allocated anew inside the timed one."""
    micro, batch = micro_step(model, device, amp, args.grad_accum), next_batch()

    def one_pass():
        with gradient_sync(wrapped, False):
            for _ in range(args.grad_accum):
                micro(*batch)

    def settle():
        optimizer.zero_grad(set_to_none=True)

    one_pass()
    settle()
    return pass_gpu_seconds(one_pass, settle, assembly.pass_spins(args.parallel, world, SPINS_S))


def batch_source(args, where, device, config, probe):
    """A function that gives the next micro-batch (inputs, targets) on the device, and the data's
    facts for the record."""
    if args.data == "synthetic":
        generator = torch.Generator().manual_seed(args.seed + 1 + where["rank"])
        rows = torch.randint(0, config.vocab, (args.batch_size, config.context + 1), generator=generator).to(device)
        fixed = (rows[:, :-1], rows[:, 1:])
        return (lambda: fixed), {"data": "synthetic"}
    windows, manifest = open_windows(CASE, config.context, config.vocab, where["rank"], where["world"], args.seed,
                                     needed=args.batch_size, per="rank")
    batches = torch_batches(windows, args.batch_size)
    pin = device.type == "cuda"

    def next_batch():
        with probe.data_wait():
            try:
                inputs, targets = next(batches)
            except TokenError as exc:  # ids beyond the vocabulary in a file too large to scan before launch
                raise SystemExit(f"{CASE}: {exc}") from None
            if pin:
                inputs, targets = inputs.pin_memory(), targets.pin_memory()
            return inputs.to(device, non_blocking=pin), targets.to(device, non_blocking=pin)

    return next_batch, data_facts(windows, manifest)


def torch_batches(windows, batch: int):
    """(inputs, targets), each a (batch, context) int64 tensor on the CPU, of the windows' rows, pass after pass."""
    for rows in windows.rows(batch):
        rows = torch.from_numpy(rows)
        yield rows[:, :-1], rows[:, 1:]


def report_work(probe, bare: GPT, config: GPTConfig, device, amp, counted: float) -> None:
    """The FLOPs of a token (the formula, beside PyTorch's count of the same step) and the device's
    matmul peak at the precision of the step's matrix products: before the warmup, never inside a
    timed window."""
    parameters = parameters_counted(bare)
    formula = training_flops_per_token(config, parameters, config.context)
    name = precision(device, amp, "matmuls")
    probe.work(flops_per_sample=formula, precision=name,
               source=f"6 N + 12 L H Q T per token (PaLM appendix B, nanoGPT), N = {parameters:,} ({N_CONVENTION})")
    probe.result(counted_flops_per_token=counted, formula_flops_per_token=formula,
                 formula_parameters=parameters, formula_parameters_convention=N_CONVENTION)
    report_peak(probe, device, name)


def counted_flops_per_token(config: GPTConfig, batch: int) -> float:
    """PyTorch's FlopCounterMode over one step (cases/_shared/flops.py), per token, of a copy of the
    model built on the meta device without activation checkpointing: MLPerf counts a model's FLOPs,
    not their recomputation, so the count depends on `config` and the batch alone (the cache's key)."""
    with torch.device("meta"):
        model = GPT(config)
    tokens = torch.zeros(batch, config.context, dtype=torch.int64, device="meta")
    key = {"case": CASE, **config.__dict__}
    per_sequence, _ = training_flops_per_sample(key, model, tokens, tokens, next_token_loss)
    return per_sequence / config.context


def train(args, probe, step, next_batch, tokens_per_step, sync, device) -> list[torch.Tensor]:
    """Warmup steps, then the timed iterations, the garbage collector as --gc-every says; every step's
    loss (detached)."""
    losses = []
    with assembly.collected_every(args.gc_every) as after_step:

        def run_step():
            losses.append(step(next_batch))
            after_step()

        with probe.warmup(images=tokens_per_step * args.num_warmup_batches, sync=sync):
            for _ in range(args.num_warmup_batches):
                run_step()

        def one_iteration():
            for _ in range(args.num_batches_per_iter):
                run_step()

        timed_iterations(probe, args.num_iters, min_seconds(args.min_seconds, device.type == "cuda"),
                         tokens_per_step * args.num_batches_per_iter, one_iteration, sync, lambda n: agree(n, device))
    return losses


def final_results(losses: list[torch.Tensor], memory: int, world: int, device: torch.device) -> dict:
    """Every step's loss averaged over the ranks and each rank's peak memory (two collectives, after the
    timed window)."""
    summed = torch.stack(losses).float()
    dist.all_reduce(summed)
    mine = torch.tensor([memory], dtype=torch.int64, device=device)
    everyone = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    means = [round(float(v) / world, 6) for v in summed.cpu()]
    return {"first_step_loss": means[0], "last_step_loss": means[-1], "first_losses": means[:FIRST_LOSSES],
            "steps": len(means), "peak_memory_bytes": [int(m.item()) for m in everyone]}


def main() -> None:
    announce()
    args = parse_case_args(__file__)
    where = place()
    device = pick_device(where, args.no_cuda)
    backend = pick_backend(CASE, args.backend, device)
    dist.init_process_group(backend)
    config = model_config(args)
    amp = amp_dtype(args, device)
    torch.manual_seed(args.seed)  # the same weights on every rank, and under ddp and fsdp alike
    bare = GPT(config, args.activation_checkpointing)
    parameters = sum(p.numel() for p in bare.parameters())
    counted = counted_flops_per_token(config, args.batch_size)
    bare.to(device)
    model, wrapped, settings = parallel(args, bare, device, where["world"], amp)
    optimizer, optimizer_impl = make_optimizer(args, bare, device)
    step = make_step(args, model, wrapped, optimizer, device, amp)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    probe = Probe(where["rank"], where["world"], where["local_rank"], where["local_world"], samples="tokens")
    next_batch, data = batch_source(args, where, device, config, probe)
    sequences = args.batch_size * args.grad_accum
    tokens_per_step = sequences * config.context
    probe.start(
        config={
            "model": "gpt", "model_name": model_name(config), "parameters": parameters,
            "layers": config.layers, "heads": config.heads, "width": config.width, "context": config.context,
            "vocab_size": config.vocab, "device_type": device.type,
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": f"amp-{str(amp).removeprefix('torch.')}" if amp else "float32", **data,
            "batch_per_device": sequences, "global_batch": sequences * where["world"],
            "micro_batch": args.batch_size, "grad_accum": args.grad_accum,
            "tokens_per_device_per_step": tokens_per_step, "global_tokens_per_step": tokens_per_step * where["world"],
            "lr": args.lr, "threads_per_worker": torch.get_num_threads(),
            "backend": backend, "launcher": args.launcher, "parallel": args.parallel, args.parallel: settings,
            "notes": assembly.world_notes(args.parallel, settings),
            "compile": args.compile, "compile_mode": args.compile_mode if args.compile else None,
            "compiled": assembly.compiled_parts(args.parallel, where["world"]) if args.compile else None,
            "optimizer": "AdamW", "optimizer_impl": optimizer_impl, "gc": assembly.gc_settings(args.gc_every),
            "preset": args.preset, "activation_checkpointing": args.activation_checkpointing, "seed": args.seed,
        },
        versions={"torch": torch.__version__, "numpy": numpy.__version__, "cuda": torch.version.cuda,
                  "hip": torch.version.hip,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None},
    )
    report_work(probe, bare, config, device, amp, counted)
    if args.compile:  # compilation happens at the first step: before the warmup, measured apart
        started = time.perf_counter()
        first = [step(next_batch)]
        if sync:
            sync()
        probe.result(compile_seconds=time.perf_counter() - started)
    else:
        first = []
    losses = first + train(args, probe, step, next_batch, tokens_per_step, sync, device)
    memory, basis = peak_memory(device)
    if device.type == "cuda":  # the GPU's own time for a step's passes, beside the timed step (diagnosis)
        probe.result(gpu_pass_s=gpu_pass_seconds(args, model, wrapped, optimizer, device, amp, next_batch,
                                                 where["world"]))
    results = final_results(losses, memory, where["world"], device)
    probe.result(**results, peak_memory_basis=basis)
    probe.end()
    del model, wrapped, step, optimizer  # the DDP reducer holds the process group: it goes with it
    leave_process_group()


if __name__ == "__main__":
    main()
    end_process()  # the work is written: skip unloading torch (suite/instack/process_end.py)
