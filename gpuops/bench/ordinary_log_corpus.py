"""Ordinary log lines of GPU/ML workloads, with no secret in them: what redaction must leave
alone (the false-redaction figure of `gpuops bench redaction`).

Lines as vLLM, PyTorch, NCCL, Hugging Face, the kubelet, containerd, HTTP servers and Python
print them, including the near misses that trip shape rules: `tokens/s`, `max_num_batched_
tokens=`, `tokenizer=`, special tokens, `api_key=None`, Secret and ConfigMap *names*, image
digests, commit hashes, UUIDs, request ids, base64-looking blobs that are not credentials,
`docker run -p 8080:80`, `-u 1000:1000`, prose that mentions passwords. Each template is
filled from a seeded RNG, so the corpus is the same on every run.
"""

from __future__ import annotations

import random
import string

HEX = "0123456789abcdef"
ALNUM = string.ascii_letters + string.digits

TEMPLATES: tuple[str, ...] = (
    # vLLM
    ("INFO {md} {hms} [loggers.py:118] Engine 000: Avg prompt throughput: {f1} tokens/s, Avg "
    "generation throughput: {f1} tokens/s, Running: {n2} reqs, Waiting: {n1} reqs, GPU KV cache "
    "usage: {pct}%, Prefix cache hit rate: {pct}%"),
    ("INFO {md} {hms} [api_server.py:1044] args: Namespace(host=None, port=8000, uvicorn_log_"
    "level='info', allow_credentials=False, allowed_origins=['*'], api_key=None, lora_modules="
    "None, model='meta-llama/Llama-3.1-8B-Instruct', tokenizer=None, max_model_len=8192, "
    "tensor_parallel_size={tp}, gpu_memory_utilization=0.9, max_num_batched_tokens=8192)"),
    ("INFO {md} {hms} [core.py:69] Initializing a V1 LLM engine (v0.9.1) with config: model="
    "'meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/"
    "Llama-3.1-8B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
    "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, "
    "load_format=auto, tensor_parallel_size={tp}, seed=0"),
    "INFO {md} {hms} [gpu_model_runner.py:1595] Model loading took {f2} GiB and {f2} seconds",
    "INFO {md} {hms} [kv_cache_utils.py:715] GPU KV cache size: {n5} tokens",
    ("INFO {md} {hms} [kv_cache_utils.py:719] Maximum concurrency for 8,192 tokens per request: "
    "{f2}x"),
    "INFO {md} {hms} [api_server.py:1336] Starting vLLM API server on http://0.0.0.0:8000",
    ("INFO {md} {hms} [launcher.py:28] Available routes are: /v1/chat/completions, "
    "/v1/completions, /v1/embeddings, /tokenize, /detokenize, /metrics, /health"),
    "INFO:     {ip}:{port} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "INFO:     {ip}:{port} - \"GET /metrics HTTP/1.1\" 200 OK",
    ("INFO {md} {hms} [logger.py:43] Received request chatcmpl-{hex32}: prompt: '<|begin_of_"
    "text|><|start_header_id|>user<|end_header_id|>', params: SamplingParams(n=1, "
    "temperature=0.7, top_p=1.0, max_tokens={n3}, stop_token_ids=[128009], skip_special_"
    "tokens=True), prompt_token_ids: None, lora_request: None."),
    ("WARNING {md} {hms} [scheduler.py:1089] Sequence group {n4} is preempted by PreemptionMode."
    "RECOMPUTE mode because there is not enough KV cache space. total_num_cumulative_"
    "preemption={n2}"),
    "INFO {md} {hms} [weight_utils.py:270] Using model weights format ['*.safetensors']",
    ("Loading safetensors checkpoint shards: {pct}% Completed | {n1}/4 [00:0{n1}<00:0{n1}, "
    "{f2}it/s]"),
    "INFO {md} {hms} [cuda.py:240] Using Flash Attention backend on V1 engine.",
    # Hugging Face / tokenizers
    "tokenizer_config.json: 100%|##########| 50.5k/50.5k [00:00<00:00, 12.3MB/s]",
    ("Special tokens have been added in the vocabulary, make sure the associated word "
    "embeddings are fine-tuned or trained."),
    ("GenerationConfig {{ \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128009], "
    "\"pad_token_id\": 128004, \"temperature\": 0.6, \"top_p\": 0.9 }}"),
    ("PreTrainedTokenizerFast(name_or_path='meta-llama/Llama-3.1-8B', vocab_size=128000, "
    "model_max_length=131072, padding_side='right', special_tokens={{'bos_token': "
    "'<|begin_of_text|>', 'eos_token': '<|end_of_text|>', 'pad_token': '<|finetune_right_pad_"
    "id|>'}})"),
    "Downloading shards: 100%|##########| 4/4 [01:{n2}<00:00, {f2}s/it]",
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-{hex8}-"
    "{hex24}) Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/"
    "resolve/main/config.json. Access to model meta-llama/Llama-3.1-8B is restricted. You must "
    "have access to it and be authenticated to access it. Please log in."),
    "Token is valid (permission: read).",
    ("The token has not been saved to the git credentials helper. Pass "
    "`add_to_git_credential=True` in this function directly."),
    # PyTorch / training
    "[rank{r}]: step {n4} | loss {f4} | lr 3.00e-04 | tokens/s {n5} | grad_norm {f2}",
    "[rank{r}]: torch 2.7.1+cu128, CUDA available: True, devices: 8",
    "[rank{r}]: initializing process group backend=nccl rank={r} world_size=8",
    "[rank{r}]: saved checkpoint to s3://ml-checkpoints/llama-ft/step_{n4}/ in {f2}s",
    "Epoch {n1}/10:  {pct}%|######    | {n4}/{n4} [{n2}:{n2}<{n2}:{n2}, {f2}it/s, loss={f4}]",
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {f2} GiB. GPU {r} has a "
    "total capacity of 79.10 GiB of which {f2} GiB is free. Including non-PyTorch memory, this "
    "process has {f2} GiB memory in use. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."),
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."),
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    ("W{md4} {hms}.{us} {pid} torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment "
    "variable for each process to be 1 in default, to avoid your system being overloaded."),
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED",
    ("[W socket.cpp:{n3}] [c10d] The client socket has failed to connect to [trainer-0."
    "trainer.ml.svc.cluster.local]:29500 (errno: 111 - Connection refused)."),
    "wandb: Tracking run with wandb version 0.19.1",
    "wandb: Run data is saved locally in /workspace/wandb/run-2025{md4}_{hms6}-{lower8}",
    "wandb: View run at https://wandb.ai/acme/llama-ft/runs/{lower8}",
    ("mlflow.tracking.fluent: Experiment with name 'llama-ft' does not exist. Creating a new "
    "experiment."),
    ("Using DeepSpeed ZeRO stage 3 with offload_optimizer=cpu, offload_param=none, "
    "stage3_max_live_parameters=1e9"),
    ("accelerate launch --num_processes 8 --main_process_port 29500 train.py --config "
    "configs/llama-ft.yaml"),
    # NCCL
    "{host}:{pid}:{pid} [{r}] NCCL INFO Bootstrap : Using eth0:{ip}<0>",
    ("{host}:{pid}:{pid} [{r}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB "
    "eth0:{ip}<0>"),
    "{host}:{pid}:{pid} [{r}] NCCL INFO Channel {n2}/32 :    0   1   2   3   4   5   6   7",
    ("{host}:{pid}:{pid} [{r}] NCCL INFO comm 0x{hex12} rank {r} nRanks 8 nNodes 1 localRanks 8 "
    "localRank {r} MNNVL 0"),
    "{host}:{pid}:{pid} [{r}] NCCL INFO cudaDriverVersion 12080",
    ("[rank{r}]:[E{md4} {hms}.{us} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={n4}, OpType=ALLREDUCE, NumelIn=262144000, "
    "NumelOut=262144000, Timeout(ms)=600000) ran for 600021 milliseconds before timing out."),
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    # kubelet / containerd / kube events
    ("I{md4} {hms}.{us}    {pid} kubelet.go:2468] \"SyncLoop (PLEG): event for pod\" pod=\"ml/"
    "{pod}\" event={{\"ID\":\"{uuid}\",\"Type\":\"ContainerStarted\",\"Data\":\"{hex64}\"}}"),
    ("I{md4} {hms}.{us}    {pid} kuberuntime_manager.go:1041] \"Back-off restarting failed "
    "container\" containerName=\"trainer\" pod=\"ml/{pod}\""),
    ("E{md4} {hms}.{us}    {pid} pod_workers.go:1301] \"Error syncing pod, skipping\" err=\"failed "
    "to \\\"StartContainer\\\" for \\\"trainer\\\" with CrashLoopBackOff: \\\"back-off 40s "
    "restarting failed container=trainer pod={pod}_ml({uuid})\\\"\" pod=\"ml/{pod}\" podUID="
    "\"{uuid}\""),
    ("E{md4} {hms}.{us}    {pid} secret.go:189] Couldn't get secret ml/hf-token: secret "
    "\"hf-token\" not found"),
    "MountVolume.SetUp failed for volume \"creds\" : secret \"db-credentials\" not found",
    "Error: secret \"registry-pull-secret\" not found",
    "Error: couldn't find key password in Secret ml/db-credentials",
    "Error: configmap \"trainer-config\" not found",
    "MountVolume.SetUp succeeded for volume \"kube-api-access-{lower5}\"",
    "Successfully assigned ml/{pod} to gpu-node-{n2}",
    "Pulling image \"nvcr.io/nvidia/pytorch:25.01-py3\"",
    ("Successfully pulled image \"vllm/vllm-openai:v0.9.1\" in {f2}s ({f2}s including waiting). "
    "Image size: 9876543210 bytes."),
    "Container image \"ghcr.io/acme/trainer@sha256:{hex64}\" already present on machine",
    "Created container: trainer",
    "Started container trainer",
    ("Liveness probe failed: Get \"http://{ip}:8000/health\": context deadline exceeded "
    "(Client.Timeout exceeded while awaiting headers)"),
    "Readiness probe failed: HTTP probe failed with statuscode: 503",
    ("0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint "
    "{{nvidia.com/gpu: present}}. preemption: 0/12 nodes are available: 12 No preemption "
    "victims found for incoming pod."),
    "Stopping container trainer",
    ("time=\"2025-06-01T{hms}.{us}Z\" level=info msg=\"StartContainer for \\\"{hex64}\\\" returns "
    "successfully\""),
    "time=\"2025-06-01T{hms}Z\" level=info msg=\"ImageCreate event name:\\\"sha256:{hex64}\\\"\"",
    "serviceaccount \"default\" token expired; projected token refreshed at 2025-06-01T{hms}Z",
    "Using credentials from /var/run/secrets/kubernetes.io/serviceaccount",
    ("W{md4} {hms}.{us}       1 reflector.go:561] k8s.io/client-go/informers/factory.go:160: "
    "failed to list *v1.Secret: secrets is forbidden: User \"system:serviceaccount:gpuops:"
    "watcher\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"),
    # HTTP access logs and proxies
    ("{ip} - - [01/Jun/2025:{hms} +0000] \"GET /api/v1/items?page={n2}&limit=50 HTTP/1.1\" 200 "
    "{n4} \"-\" \"python-requests/2.32.3\""),
    ("{ip} - - [01/Jun/2025:{hms} +0000] \"POST /v1/completions HTTP/1.1\" 200 {n4} \"-\" "
    "\"OpenAI/Python 1.54.0\" rt={f4} uct=\"0.000\" uht=\"{f4}\" urt=\"{f4}\""),
    ("[2025-06-01T{hms}.{ms}Z] \"GET /healthz HTTP/1.1\" 200 - 0 2 1 - \"{ip}\" \"kube-probe/1.32\""
    " \"{uuid}\" \"{ip}:8080\" \"{ip}:8080\""),
    "{ts} INFO 10.0.{n2}.{n2} - \"GET /api/v1/items HTTP/1.1\" 200 {n2}ms",
    "127.0.0.1:{port} - \"GET /v1/models HTTP/1.1\" 401 Unauthorized",
    "request_id={hex32} method=POST path=/v1/embeddings status=200 duration_ms={n3}",
    "traceparent: 00-{hex32}-{hex16}-01",
    "X-Request-Id: {uuid}",
    "< HTTP/1.1 200 OK\n< Content-Type: application/json\n< Content-Length: {n4}",
    ("> GET /v1/models HTTP/1.1\n> Host: llama-8b.ml.svc.cluster.local:8000\n> User-Agent: "
    "curl/8.5.0\n> Accept: */*"),
    "* Connected to llama-8b.ml.svc.cluster.local ({ip}) port 8000",
    "Set-Cookie-Policy: strict",
    # Python tracebacks and app logs
    "Traceback (most recent call last):",
    ("  File \"/usr/local/lib/python3.11/site-packages/redis/connection.py\", line 707, in "
    "connect"),
    "    sock = self.retry.call_with_retry(self._connect, self.disconnect)",
    "redis.exceptions.ConnectionError: Error 111 connecting to cache:6379. Connection refused.",
    ("psycopg.OperationalError: connection failed: connection to server at \"{ip}\", port 5432 "
    "failed: FATAL:  password authentication failed for user \"app\""),
    ("sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at "
    "\"db.internal\" ({ip}), port 5432 failed: Connection refused"),
    "django.core.exceptions.ImproperlyConfigured: The SECRET_KEY setting must not be empty.",
    "KeyError: 'HF_TOKEN'",
    ("ValueError: api_key must be set either by passing api_key to the client or by setting the "
    "OPENAI_API_KEY environment variable"),
    ("openai.AuthenticationError: Error code: 401 - {{'error': {{'message': 'Incorrect API key "
    "provided. You can find your API key at https://platform.openai.com/account/api-keys.', "
    "'type': 'invalid_request_error', 'code': 'invalid_api_key'}}}}"),
    "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
    "botocore.credentials: Found credentials in environment variables.",
    "{ts} INFO starting trainer (image ghcr.io/acme/trainer:1.4.{n1})",
    "{ts} INFO listening on 0.0.0.0:8080",
    ("{ts} WARNING retrying in {n1}s (attempt {n1}/5): HTTPSConnectionPool(host='huggingface.co',"
    " port=443): Read timed out. (read timeout=10)"),
    "{ts} ERROR fatal error during startup, exiting",
    "{ts} INFO loaded config from /etc/trainer/config.yaml (sha256 {hex64})",
    "{ts} INFO git commit {hex40} (branch main)",
    "{ts} DEBUG cache key {hex32} hit ratio {f2}",
    "{ts} INFO uploaded artifact s3://ml-artifacts/runs/{uuid}/model.tar.gz etag=\"{hex32}\"",
    "{ts} INFO password rotation scheduled for 2025-07-01; no action needed",
    "{ts} INFO user app logged in with a password (MFA: totp)",
    "{ts} INFO reading secret from /var/run/secrets/db/password",
    "{ts} INFO token bucket refilled: {n2} tokens available",
    "{ts} INFO credentials loaded from IRSA role arn:aws:iam::123456789012:role/trainer",
    "{ts} INFO using secretName=db-credentials secretKey=password for DATABASE_PASSWORD",
    "{ts} INFO auth: using in-cluster service account",
    "{ts} INFO signing requests with AWS SigV4 for region us-east-1",
    "{ts} INFO session {uuid} opened for user app",
    "{ts} INFO uploaded {n3} objects; content-md5 {b64_22}==",
    "{ts} DEBUG nonce={hex16} attempt={n1}",
    "{ts} INFO docker run -d -p 8080:80 -u 1000:1000 --name web nginx:1.27",
    "{ts} INFO ssh -p 2222 -o StrictHostKeyChecking=no ubuntu@{ip} nvidia-smi",
    "{ts} INFO mkdir -p /workspace/checkpoints && tar -xzf weights.tar.gz -C /workspace",
    "{ts} INFO mysql -h db.internal -u app -p main (password prompt; not echoed)",
    "{ts} INFO curl -sS -u app https://registry.acme.io/v2/_catalog (password prompt)",
    "{ts} INFO helm upgrade --install trainer ./chart --set image.tag=1.4.{n1} --wait",
    "{ts} INFO kubectl get secret db-credentials -o jsonpath='{{.metadata.name}}'",
    "{ts} INFO connecting to postgres://db.internal:5432/main as app",
    "{ts} INFO redis url redis://cache:6379/0",
    "{ts} INFO endpoint https://api.openai.com/v1/chat/completions model=gpt-4o-mini",
    "{ts} INFO using model sk-learn-baseline-v2 for scoring",
    "{ts} INFO basic configuration loaded from defaults",
    "{ts} INFO Bearer authentication enabled for /v1 routes",
    "nvidia-smi: NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8",
    "|   {r}  NVIDIA H100 80GB HBM3          On  |   00000000:{hexu2}:00.0 Off |    0 |",
    "GPU-{uuid}: Xid 79: GPU has fallen off the bus",
    ("NVRM: Xid (PCI:0000:{hexu2}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
    "the bus."),
    ("dcgm-exporter: Collecting DCP metrics: DCGM_FI_PROF_GR_ENGINE_ACTIVE, "
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    "base64 config digest: {b64_44}",
    "image: ghcr.io/acme/trainer@sha256:{hex64}",
    "commit: {hex40}",
    "{ts} INFO trace id {hex32} span id {hex16}",
    "{ts} INFO JWT validation failed: token expired at 2025-06-01T{hms}Z",
    "{ts} INFO public key fingerprint SHA256:{b64_43}",
    "-----BEGIN CERTIFICATE-----",
    "{ts} INFO TLS certificate for llama-8b.acme.io expires in {n2} days",
    "{ts} INFO max_tokens={n3} temperature=0.7 top_p=0.95 num_tokens={n4} token_count={n3}",
    ("{ts} INFO tokenizer=meta-llama/Llama-3.1-8B-Instruct pad_token=<|eot_id|> "
    "eos_token_id=128009"),
)


def _fill(template: str, rng: random.Random) -> str:
    def hexs(n: int) -> str:
        return "".join(rng.choice(HEX) for _ in range(n))

    def b64(n: int) -> str:
        return "".join(rng.choice(ALNUM + "+/") for _ in range(n))
    fields = {
        "md": f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "md4": f"{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}",
        "hms": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
        "hms6": f"{rng.randint(0, 23):02d}{rng.randint(0, 59):02d}{rng.randint(0, 59):02d}",
        "us": f"{rng.randint(0, 999999):06d}", "ms": f"{rng.randint(0, 999):03d}",
        "ts": f"2025-06-01T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
              f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z",
        "ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "port": str(rng.randint(30000, 65000)), "pid": str(rng.randint(1, 99999)),
        "n1": str(rng.randint(1, 9)), "n2": str(rng.randint(10, 99)),
        "n3": str(rng.randint(100, 999)), "n4": str(rng.randint(1000, 9999)),
        "n5": str(rng.randint(10000, 99999)), "r": str(rng.randint(0, 7)),
        "tp": str(rng.choice((1, 2, 4, 8))), "pct": f"{rng.uniform(0, 100):.1f}",
        "f1": f"{rng.uniform(100, 3000):.1f}", "f2": f"{rng.uniform(0, 100):.2f}",
        "f4": f"{rng.uniform(0, 5):.4f}",
        "hex8": hexs(8), "hex12": hexs(12), "hex16": hexs(16), "hex24": hexs(24),
        "hex32": hexs(32), "hex40": hexs(40), "hex64": hexs(64),
        "hexu2": hexs(2).upper(),
        "uuid": f"{hexs(8)}-{hexs(4)}-4{hexs(3)}-a{hexs(3)}-{hexs(12)}",
        "lower5": "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(5)),
        "lower8": "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(8)),
        "b64_22": b64(22), "b64_43": b64(43), "b64_44": b64(44),
        "pod": f"trainer-{hexs(9)}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}",
        "host": f"trainer-{rng.randint(0, 7)}",
    }
    return template.format(**fields)


def ordinary_lines(seed: int = 0, copies: int = 3) -> list[str]:
    """`copies` fillings of every template (one line each; a template with `\\n` is kept as one
    block, as its lines only make sense together)."""
    rng = random.Random(f"ordinary:{seed}")
    return [_fill(t, rng) for _ in range(copies) for t in TEMPLATES]
