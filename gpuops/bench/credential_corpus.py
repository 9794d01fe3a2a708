"""Realistic credential formats, each in a log line the software that handles it prints.

Each format is written from the vendor's public description of it (prefix, alphabet, length,
where it appears: a CLI's output, a config file a container cats at start, a header in
`curl -v`, a DSN in a driver's error, a Python repr). No value is stored: every value is
generated at run time from its format with a seeded RNG, so the tests and `gpuops bench
redaction` are reproducible and there is nothing for a secret scanner to find in the repo.

`credentials(seed)` gives one `Credential` per format: the rendered line, the values put in
it (what an environment variable or a Secret would hold) and the random parts that must not
survive redaction (`leaked_in`).
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass

UPPER, LOWER, DIGITS = string.ascii_uppercase, string.ascii_lowercase, string.digits
ALNUM = UPPER + LOWER + DIGITS
LOWER_ALNUM = LOWER + DIGITS
UPPER_ALNUM = UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
PASSWORD = ALNUM + "-_.!*~"
BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
LEAK_WINDOW = 10  # a run of this many characters of a secret in the output is a leak
MIN_JUDGED_RUN = 8  # shorter random parts may be in any text by chance: not judged


@dataclass(frozen=True)
class Run:
    """`length` random characters of `alphabet`; `secret=False` for the parts of a token that
    identify rather than authenticate (a Slack team id), which may stay visible."""

    alphabet: str
    length: int
    secret: bool = True


Part = str | Run


@dataclass(frozen=True)
class Secret:
    value: str
    runs: tuple[str, ...]  # what must not survive redaction


SecretMaker = Callable[[random.Random], Secret]


def token(*parts: Part) -> SecretMaker:
    """A token made of literal parts (its prefix) and random runs."""
    def make(rng: random.Random) -> Secret:
        value, runs, current = [], [], ""
        for part in parts:
            if isinstance(part, str) or not part.secret:
                chunk = part if isinstance(part, str) else _draw(rng, part)
                value.append(chunk)
                runs.append(current)
                current = ""
                continue
            chunk = _draw(rng, part)
            value.append(chunk)
            current += chunk  # adjacent random runs are one secret run
        runs.append(current)
        return Secret("".join(value), tuple(r for r in runs if r))
    return make


def _draw(rng: random.Random, run: Run) -> str:
    return "".join(rng.choice(run.alphabet) for _ in range(run.length))


def basic_auth(user: str, password: SecretMaker) -> SecretMaker:
    """base64(`user:password`), as in `Authorization: Basic` and docker's config.json."""
    def make(rng: random.Random) -> Secret:
        encoded = base64.b64encode(f"{user}:{password(rng).value}".encode()).decode()
        return Secret(encoded, (encoded[len(user) * 4 // 3 + 2:],))
    return make


def pem_body(lines: int, width: int = 64, last: int = 40) -> SecretMaker:
    """The base64 body of a key block (newline-separated lines)."""
    def make(rng: random.Random) -> Secret:
        rows = ["".join(rng.choice(B64) for _ in range(width)) for _ in range(lines)]
        rows.append("".join(rng.choice(B64) for _ in range(last)) + "==")
        return Secret("\n".join(rows), tuple(rows))
    return make


def pem_b64(kind: str) -> SecretMaker:
    """base64 of a whole PEM block, as kubeconfig's `client-key-data` holds it."""
    body = pem_body(8)

    def make(rng: random.Random) -> Secret:
        pem = f"-----BEGIN {kind}-----\n{body(rng).value}\n-----END {kind}-----\n"
        encoded = base64.b64encode(pem.encode()).decode()
        return Secret(encoded, (encoded[40:],))
    return make


@dataclass(frozen=True)
class CredentialFormat:
    name: str
    family: str  # cloud, ci, registry, ml, database, chat, saas, key
    line: str  # `{{name}}` marks where each secret goes
    secrets: Mapping[str, SecretMaker]


@dataclass(frozen=True)
class Credential:
    format: CredentialFormat
    line: str
    values: dict[str, str]
    runs: tuple[str, ...]

    def leaked_in(self, text: str) -> list[str]:
        """The secret runs of which `LEAK_WINDOW` consecutive characters are in `text`."""
        leaked = []
        for run in self.runs:
            if len(run) < MIN_JUDGED_RUN:
                continue
            size = min(LEAK_WINDOW, len(run))
            if any(run[i:i + size] in text for i in range(len(run) - size + 1)):
                leaked.append(run)
        return leaked


def _pw(n: int = 16) -> SecretMaker:
    return token(Run(PASSWORD, n))


_UUID = token(Run(HEX, 8), "-", Run(HEX, 4), "-4", Run(HEX, 3), "-a", Run(HEX, 3), "-",
              Run(HEX, 12))
_SA_PEM = pem_body(25)
_AWS_ID = token("AKIA", Run(UPPER_ALNUM, 16))
_AWS_TEMP_ID = token("ASIA", Run(UPPER_ALNUM, 16))
_AWS_SECRET = token(Run(B64, 40))
_SLACK_BOT = token("xoxb-", Run(DIGITS, 12, False), "-", Run(DIGITS, 13, False), "-",
                   Run(ALNUM, 24))
_GHP = token("ghp_", Run(ALNUM, 36))


def F(name: str, family: str, line: str, **secrets: SecretMaker) -> CredentialFormat:
    return CredentialFormat(name, family, line, secrets)


FORMATS: tuple[CredentialFormat, ...] = (
    # --- clouds ------------------------------------------------------------------------------
    F("aws-credentials-file", "cloud",
      "+ cat ~/.aws/credentials\n[default]\naws_access_key_id = {{id}}\n"
      "aws_secret_access_key = {{secret}}\nregion = us-east-1", id=_AWS_ID, secret=_AWS_SECRET),
    F("aws-export-credentials", "cloud",
      "$ aws configure export-credentials --format env\nexport AWS_ACCESS_KEY_ID={{id}}\n"
      "export AWS_SECRET_ACCESS_KEY={{secret}}\nexport AWS_SESSION_TOKEN={{session}}",
      id=_AWS_TEMP_ID, secret=_AWS_SECRET, session=token("IQoJb3JpZ2luX2VjE", Run(B64, 300))),
    F("aws-sts-assume-role-json", "cloud",
      '{"Credentials": {"AccessKeyId": "{{id}}", "SecretAccessKey": "{{secret}}", '
      '"SessionToken": "{{session}}", "Expiration": "2025-06-01T12:00:00+00:00"}, '
      '"AssumedRoleUser": {"Arn": "arn:aws:sts::123456789012:assumed-role/trainer/job"}}',
      id=_AWS_TEMP_ID, secret=_AWS_SECRET, session=token("FwoGZXIvYXdzE", Run(B64, 280))),
    F("aws-s3-presigned-url", "cloud",
      'INFO downloading https://weights.s3.amazonaws.com/llama/model-00001.safetensors?'
      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={{id}}%2F20250601%2Fus-east-1%2Fs3"
      "%2Faws4_request&X-Amz-Date=20250601T120000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
      "&X-Amz-Signature={{sig}}", id=_AWS_ID, sig=token(Run(HEX, 64))),
    F("gcp-service-account-json", "cloud",
      '{"type": "service_account", "project_id": "ml-prod", "private_key_id": "{{kid}}", '
      '"private_key": "-----BEGIN PRIVATE KEY-----\\n{{body}}\\n-----END PRIVATE KEY-----\\n", '
      '"client_email": "trainer@ml-prod.iam.gserviceaccount.com", "client_id": '
      '"104532219873456789012"}', kid=token(Run(HEX, 40)),
      body=lambda rng: _escaped(_SA_PEM(rng))),
    F("gcp-api-key", "cloud",
      '10.0.3.7 - - [01/Jun/2025:10:00:00 +0000] "POST /v1beta/models/gemini-1.5-pro:'
      'generateContent?key={{key}} HTTP/1.1" 200 1843', key=token("AIza", Run(B64URL, 35))),
    F("gcp-oauth-client-secret", "cloud",
      '{"installed": {"client_id": "734112345678-abc.apps.googleusercontent.com", '
      '"project_id": "ml-prod", "client_secret": "{{secret}}", "redirect_uris": '
      '["http://localhost"]}}', secret=token("GOCSPX-", Run(B64URL, 28))),
    F("gcp-access-token", "cloud",
      "+ gcloud auth print-access-token\n{{token}}",
      token=token("ya29.a0AfB_by", Run(B64URL, 180))),
    F("gcp-refresh-token", "cloud",
      '{"client_id": "32555940559.apps.googleusercontent.com", "refresh_token": "{{token}}", '
      '"type": "authorized_user"}', token=token("1//0", Run(B64URL, 99))),
    F("azure-storage-connection-string", "cloud",
      "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=mlartifacts;"
      "AccountKey={{key}};EndpointSuffix=core.windows.net", key=token(Run(B64, 86), "==")),
    F("azure-sas-url", "cloud",
      "azcopy copy 'https://mlartifacts.blob.core.windows.net/models/llama.bin?sv=2022-11-02&"
      "ss=b&srt=co&sp=rl&se=2025-06-02T00:00:00Z&st=2025-06-01T00:00:00Z&spr=https&sig={{sig}}"
      "' /models/", sig=token(Run(ALNUM, 43), "%3D")),
    F("azure-service-principal-login", "cloud",
      "+ az login --service-principal -u 0f5d3c2e-7a1b-4c9d-8e2f-1a2b3c4d5e6f -p {{secret}} "
      "--tenant 72f988bf-86f1-41af-91ab-2d7cd011db47",
      secret=token(Run(ALNUM, 3), Run(DIGITS, 1), "Q~", Run(ALNUM + "_~.-", 34))),
    F("azure-service-bus", "cloud",
      "ServiceBusConnectionString: Endpoint=sb://gpuops-events.servicebus.windows.net/;"
      "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={{key}}",
      key=token(Run(B64, 43), "=")),
    F("azure-cosmos-connection-string", "cloud",
      "COSMOS_CONNECTION=AccountEndpoint=https://features.documents.azure.com:443/;"
      "AccountKey={{key}};", key=token(Run(B64, 86), "==")),
    F("azure-openai-api-key", "cloud",
      "> POST /openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01 HTTP/1.1\n"
      "> Host: ml-prod.openai.azure.com\n> api-key: {{key}}\n> Content-Type: application/json",
      key=token(Run(HEX, 32))),
    F("azure-apim-subscription-key", "cloud",
      "> Ocp-Apim-Subscription-Key: {{key}}", key=token(Run(HEX, 32))),
    F("digitalocean-token", "cloud",
      "+ doctl auth init --access-token {{token}}", token=token("dop_v1_", Run(HEX, 64))),
    F("alibaba-access-key", "cloud",
      "+ aliyun configure set --access-key-id {{id}} --access-key-secret {{secret}} "
      "--region cn-hangzhou", id=token("LTAI", Run(ALNUM, 20)), secret=token(Run(ALNUM, 30))),
    F("ibm-cloud-api-key", "cloud",
      "+ ibmcloud login --apikey {{key}} -r us-south", key=token(Run(B64URL, 44))),
    F("cloudflare-api-token", "cloud",
      "CLOUDFLARE_API_TOKEN={{token}}", token=token(Run(B64URL, 40))),
    # --- CI systems, source hosting, infrastructure --------------------------------------------
    F("github-classic-pat", "ci",
      "+ echo {{token}} | docker login ghcr.io -u acme-bot --password-stdin", token=_GHP),
    F("github-fine-grained-pat", "ci",
      "> GET /repos/acme/llm-serving/contents/config.yaml HTTP/2\n> Host: api.github.com\n"
      "> Authorization: token {{token}}\n> Accept: application/vnd.github+json",
      token=token("github_pat_11", Run(UPPER_ALNUM, 20), "_", Run(ALNUM, 59))),
    F("github-app-installation-token", "ci",
      "+ git remote set-url origin https://x-access-token:{{token}}@github.com/acme/models.git",
      token=token("ghs_", Run(ALNUM, 36))),
    F("github-oauth-token-json", "ci",
      '{"access_token": "{{token}}", "token_type": "bearer", "scope": "repo,read:org"}',
      token=token("gho_", Run(ALNUM, 36))),
    F("gitlab-pat", "ci",
      "export GITLAB_TOKEN={{token}}", token=token("glpat-", Run(B64URL, 20))),
    F("gitlab-runner-token", "ci",
      "+ gitlab-runner register --non-interactive --url https://gitlab.com --token {{token}} "
      "--executor kubernetes", token=token("glrt-", Run(B64URL, 20))),
    F("gitlab-deploy-token", "ci",
      "+ docker login registry.gitlab.com -u gitlab+deploy-token-42 -p {{token}}",
      token=token("gldt-", Run(B64URL, 20))),
    F("gitlab-ci-job-token", "ci",
      "Cloning into 'models'...\n+ git clone https://gitlab-ci-token:{{token}}@gitlab.com/acme/"
      "models.git", token=token("glcbt-64_", Run(B64URL, 20))),
    F("gitlab-pipeline-trigger", "ci",
      "+ curl -X POST --fail -F token={{token}} -F ref=main "
      "https://gitlab.com/api/v4/projects/42/trigger/pipeline",
      token=token("glptt-", Run(HEX, 40))),
    F("gitlab-private-token-header", "ci",
      '+ curl --header "PRIVATE-TOKEN: {{token}}" https://gitlab.com/api/v4/projects',
      token=token("glpat-", Run(B64URL, 20))),
    F("circleci-token", "ci",
      "> Circle-Token: {{token}}",
      token=token("CCIPAT_", Run(ALNUM, 22), "_", Run(HEX, 40))),
    F("buildkite-api-token", "ci",
      "BUILDKITE_API_TOKEN={{token}}", token=token("bkua_", Run(HEX, 40))),
    F("jenkins-cli-auth", "ci",
      "+ java -jar jenkins-cli.jar -s https://ci.acme.io/ -auth admin:{{token}} build "
      "train-llm", token=token("11", Run(HEX, 32))),
    F("terraform-cloud-credentials", "ci",
      'credentials "app.terraform.io" {\n  token = "{{token}}"\n}',
      token=token(Run(ALNUM, 14), ".atlasv1.", Run(ALNUM, 67))),
    F("vault-login-output", "ci",
      "Key                  Value\n---                  -----\ntoken                {{token}}"
      "\ntoken_accessor       gGkLZc1n0Hv3lOo3J1mBh9Vh\ntoken_duration       768h",
      token=token("hvs.CAESI", Run(B64URL, 90))),
    F("sonarqube-token", "ci",
      "+ mvn sonar:sonar -Dsonar.host.url=https://sonar.acme.io -Dsonar.token={{token}}",
      token=token("sqp_", Run(HEX, 40))),
    F("sentry-dsn", "ci",
      "SENTRY_DSN=https://{{key}}@o450123.ingest.sentry.io/5512345", key=token(Run(HEX, 32))),
    F("sentry-auth-token", "ci",
      "+ sentry-cli --auth-token {{token}} releases new 1.4.2",
      token=token("sntryu_", Run(HEX, 64))),
    F("argocd-login", "ci",
      "+ argocd login argocd.acme.io --username admin --password {{password}} --grpc-web",
      password=_pw()),
    F("tailscale-auth-key", "ci",
      "+ tailscale up --authkey={{key}} --hostname=gpu-node-a1",
      key=token("tskey-auth-", Run(ALNUM, 17), "-", Run(ALNUM, 32))),
    F("pulumi-access-token", "ci",
      "PULUMI_ACCESS_TOKEN={{token}}", token=token("pul-", Run(HEX, 40))),
    F("doppler-service-token", "ci",
      "+ doppler run --token {{token}} -- python serve.py",
      token=token("dp.st.prd.", Run(ALNUM, 43))),
    # --- package registries ------------------------------------------------------------------
    F("npmrc-auth-token", "registry",
      "+ cat .npmrc\n//registry.npmjs.org/:_authToken={{token}}\nalways-auth=true",
      token=token("npm_", Run(ALNUM, 36))),
    F("pypi-upload-token", "registry",
      "+ twine upload --username __token__ --password {{token}} dist/*",
      token=token("pypi-AgEIcHlwaS5vcmc", Run(B64URL, 160))),
    F("pip-extra-index-url", "registry",
      "+ pip install --extra-index-url https://aws:{{token}}@acme-123456789012.d.codeartifact."
      "us-east-1.amazonaws.com/pypi/ml/simple/ vllm==0.9.1",
      token=token("eyJ2ZXIiOjEsImlzdSI6", Run(B64URL, 380))),
    F("pip-conf-index-url", "registry",
      "[global]\nindex-url = https://__token__:{{token}}@gitlab.com/api/v4/projects/42/"
      "packages/pypi/simple", token=token("glpat-", Run(B64URL, 20))),
    F("docker-hub-login", "registry",
      "+ docker login -u acmebot -p {{token}}\nWARNING! Using --password via the CLI is "
      "insecure. Use --password-stdin.", token=token("dckr_pat_", Run(B64URL, 27))),
    F("docker-config-json", "registry",
      '{"auths": {"https://index.docker.io/v1/": {"auth": "{{auth}}"}}}',
      auth=basic_auth("acmebot", _pw(24))),
    F("ngc-docker-login", "registry",
      "+ docker login nvcr.io -u '$oauthtoken' -p {{key}}",
      key=token("nvapi-", Run(B64URL, 64))),
    F("rubygems-credentials", "registry",
      "---\n:rubygems_api_key: {{key}}", key=token("rubygems_", Run(HEX, 48))),
    F("nuget-push", "registry",
      "+ dotnet nuget push Acme.Tokenizers.1.4.2.nupkg --api-key {{key}} --source "
      "https://api.nuget.org/v3/index.json", key=token("oy2", Run(LOWER_ALNUM, 43))),
    F("jfrog-api-key-header", "registry",
      "> X-JFrog-Art-Api: {{key}}", key=token("AKCp", Run(ALNUM, 69))),
    F("jfrog-access-token", "registry",
      "+ jf config add acme --url https://acme.jfrog.io --access-token {{token}}",
      token=token("cmVmdGtuOjAxOjE3", Run(B64URL, 48))),
    F("maven-settings-xml", "registry",
      "<server>\n  <id>acme-releases</id>\n  <username>ci</username>\n  <password>{{password}}"
      "</password>\n</server>", password=_pw(20)),
    F("helm-repo-add", "registry",
      "+ helm repo add acme https://charts.acme.io --username ci --password {{password}}",
      password=_pw()),
    F("cargo-registry-token", "registry",
      "CARGO_REGISTRY_TOKEN={{token}}", token=token("cio", Run(ALNUM, 32))),
    # --- ML platforms and AI APIs ------------------------------------------------------------
    F("huggingface-login", "ml",
      "+ huggingface-cli login --token {{token}} --add-to-git-credential",
      token=token("hf_", Run(ALNUM, 34))),
    F("huggingface-git-url", "ml",
      "+ git clone https://acme:{{token}}@huggingface.co/meta-llama/Llama-3.1-8B-Instruct",
      token=token("hf_", Run(ALNUM, 34))),
    F("openai-project-key-dict", "ml",
      "OpenAI client config: {'api_key': '{{key}}', 'base_url': 'https://api.openai.com/v1', "
      "'timeout': 600.0, 'max_retries': 2}",
      key=token("sk-proj-", Run(B64URL, 74), "T3BlbkFJ", Run(B64URL, 74))),
    F("openai-service-account-env", "ml",
      "OPENAI_API_KEY={{key}}", key=token("sk-svcacct-", Run(B64URL, 74), "T3BlbkFJ",
                                          Run(B64URL, 74))),
    F("anthropic-curl", "ml",
      '+ curl https://api.anthropic.com/v1/messages -H "x-api-key: {{key}}" -H '
      '"anthropic-version: 2023-06-01"', key=token("sk-ant-api03-", Run(B64URL, 93), "AA")),
    F("wandb-netrc", "ml",
      "+ cat ~/.netrc\nmachine api.wandb.ai\n  login user\n  password {{key}}",
      key=token(Run(HEX, 40))),
    F("wandb-env", "ml", "WANDB_API_KEY={{key}}", key=token(Run(HEX, 40))),
    F("databricks-cfg", "ml",
      "[DEFAULT]\nhost = https://adb-1234567890123456.7.azuredatabricks.net\n"
      "token = {{token}}", token=token("dapi", Run(HEX, 32))),
    F("replicate-token", "ml",
      "REPLICATE_API_TOKEN={{token}}", token=token("r8_", Run(ALNUM, 37))),
    F("groq-key-in-traceback", "ml",
      'Traceback (most recent call last):\n  File "/app/agent.py", line 12, in <module>\n'
      '    client = Groq(api_key="{{key}}")\nNameError: name \'Groq\' is not defined',
      key=token("gsk_", Run(ALNUM, 52))),
    F("pinecone-key", "ml",
      "pinecone.init(api_key='{{key}}', environment='us-east-1-aws')",
      key=token("pcsk_", Run(ALNUM, 5), "_", Run(ALNUM, 63))),
    F("langsmith-key", "ml",
      "LANGCHAIN_API_KEY={{key}}", key=token("lsv2_pt_", Run(HEX, 32), "_", Run(HEX, 10))),
    F("modal-token-set", "ml",
      "+ modal token set --token-id {{id}} --token-secret {{secret}}",
      id=token("ak-", Run(ALNUM, 22)), secret=token("as-", Run(ALNUM, 22))),
    F("mlflow-tracking-uri", "ml",
      "MLFLOW_TRACKING_URI=https://mlflow:{{password}}@mlflow.acme.io", password=_pw()),
    F("perplexity-key", "ml", "PPLX_API_KEY={{key}}", key=token("pplx-", Run(ALNUM, 48))),
    # --- databases ---------------------------------------------------------------------------
    F("postgres-dsn-in-error", "database",
      "django.db.utils.OperationalError: could not connect to server (DATABASE_URL=postgres://"
      "app:{{password}}@db.internal:5432/main)", password=_pw()),
    F("django-settings-dump", "database",
      "DATABASES = {'default': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'main', "
      "'USER': 'app', 'PASSWORD': '{{password}}', 'HOST': 'db', 'PORT': '5432'}}\n"
      "SECRET_KEY = 'django-insecure-{{key}}'", password=_pw(), key=token(Run(PASSWORD, 50))),
    F("psycopg-conninfo", "database",
      '    conn = psycopg2.connect("dbname=main user=app password={{password}} host=db.internal'
      ' port=5432")', password=_pw()),
    F("mysql-cli", "database",
      "+ mysql -h db.internal -u root -p{{password}} -e 'SHOW DATABASES'", password=_pw()),
    F("sqlalchemy-mysql-url", "database",
      "sqlalchemy.exc.OperationalError: (pymysql.err.OperationalError) (2003, \"Can't connect to"
      " MySQL server\") engine=mysql+pymysql://feast:{{password}}@mysql:3306/feast",
      password=_pw()),
    F("mongodb-srv", "database",
      "pymongo.errors.ServerSelectionTimeoutError: mongodb+srv://ml:{{password}}@cluster0.ab12c."
      "mongodb.net/?retryWrites=true&w=majority timed out", password=_pw()),
    F("redis-cli-a", "database",
      "+ redis-cli -h cache -p 6379 -a {{password}} PING\nWarning: Using a password with '-a' "
      "or '-u' option on the command line interface may not be safe.", password=_pw()),
    F("redis-url", "database",
      "CELERY_BROKER_URL=redis://:{{password}}@cache:6379/0", password=_pw()),
    F("sqlserver-ado", "database",
      "ConnectionStrings__Default=Server=tcp:ml.database.windows.net,1433;Initial Catalog="
      "features;User ID=app;Password={{password}};Encrypt=True;", password=_pw()),
    F("odbc-braced-pwd", "database",
      "pyodbc.connect('DRIVER={ODBC Driver 18 for SQL Server};SERVER=ml.database.windows.net;"
      "DATABASE=features;UID=app;PWD={{{password}}}')", password=_pw()),
    F("jdbc-url", "database",
      "spark.read.jdbc(url='jdbc:postgresql://db:5432/main?user=app&password={{password}}&"
      "ssl=true', table='events')", password=_pw()),
    F("snowflake-url", "database",
      "SNOWFLAKE_URL=snowflake://ml_app:{{password}}@acme-xy12345/ML/PUBLIC?warehouse=GPU_WH",
      password=_pw()),
    F("elasticsearch-url", "database",
      "Elasticsearch(['https://elastic:{{password}}@es.internal:9200'], verify_certs=True)",
      password=_pw()),
    F("elasticsearch-api-key-header", "database",
      "> Authorization: ApiKey {{key}}", key=token(Run(B64, 60), "==")),
    F("clickhouse-client", "database",
      "+ clickhouse-client --host ch --user default --password {{password}} --query "
      "'SELECT 1'", password=_pw()),
    F("kafka-sasl-jaas", "database",
      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
      'username="app" password="{{password}}";', password=_pw()),
    F("sqlplus", "database",
      "+ sqlplus scott/{{password}}@//db.internal:1521/ORCLPDB1", password=_pw()),
    # --- chat tools --------------------------------------------------------------------------
    F("slack-bot-token-dict", "chat",
      "slack request: {'token': '{{token}}', 'channel': '#alerts', 'text': 'deploy done'}",
      token=_SLACK_BOT),
    F("slack-user-token", "chat",
      "SLACK_USER_TOKEN={{token}}",
      token=token("xoxp-", Run(DIGITS, 12, False), "-", Run(DIGITS, 12, False), "-",
                  Run(DIGITS, 13, False), "-", Run(HEX, 32))),
    F("slack-app-token", "chat",
      "SLACK_APP_TOKEN={{token}}",
      token=token("xapp-1-A0", Run(UPPER_ALNUM, 9, False), "-", Run(DIGITS, 13, False), "-",
                  Run(HEX, 64))),
    F("slack-config-tokens", "chat",
      "$ slack config tokens\nAccess token: {{access}}\nRefresh token: {{refresh}}",
      access=token("xoxe.xoxp-1-", Run(B64URL, 140)),
      refresh=token("xoxe-1-", Run(B64URL, 140))),
    F("slack-webhook", "chat",
      "POST https://hooks.slack.com/services/T0{{team}}/B0{{bot}}/{{secret}} -> 200",
      team=token(Run(UPPER_ALNUM, 9, False)), bot=token(Run(UPPER_ALNUM, 9, False)),
      secret=token(Run(ALNUM, 24))),
    F("slack-signing-secret", "chat",
      "SLACK_SIGNING_SECRET={{secret}}", secret=token(Run(HEX, 32))),
    F("discord-bot-token", "chat",
      '    client.run("{{token}}")',
      token=token("MT", Run(ALNUM, 24), ".", Run(B64URL, 6), ".", Run(B64URL, 38))),
    F("discord-webhook", "chat",
      "requests.post('https://discord.com/api/webhooks/{{id}}/{{token}}', json=payload)",
      id=token(Run(DIGITS, 19, False)), token=token(Run(B64URL, 68))),
    F("telegram-bot", "chat",
      "HTTP Error 409 for url: https://api.telegram.org/bot{{token}}/getUpdates",
      token=token(Run(DIGITS, 10, False), ":AA", Run(B64URL, 33))),
    F("teams-webhook", "chat",
      "TEAMS_WEBHOOK_URL=https://acme.webhook.office.com/webhookb2/{{a}}@{{b}}/IncomingWebhook/"
      "{{c}}/{{d}}", a=_UUID, b=_UUID, c=token(Run(HEX, 32)), d=_UUID),
    F("mattermost-webhook", "chat",
      "curl -i -X POST -d 'payload={\"text\": \"done\"}' https://chat.acme.io/hooks/{{key}}",
      key=token(Run(LOWER_ALNUM, 26))),
    # --- payments and SaaS APIs --------------------------------------------------------------
    F("stripe-secret-key-in-traceback", "saas",
      '  File "/app/billing.py", line 8, in <module>\n    stripe.api_key = "{{key}}"',
      key=token("sk_live_", Run(ALNUM, 99))),
    F("stripe-restricted-key", "saas",
      "STRIPE_KEY={{key}}", key=token("rk_live_", Run(ALNUM, 99))),
    F("stripe-webhook-secret", "saas",
      "> Ready! Your webhook signing secret is {{secret}} (^C to quit)",
      secret=token("whsec_", Run(ALNUM, 32))),
    F("twilio-api-key", "saas",
      "TWILIO_API_KEY={{sid}}\nTWILIO_API_SECRET={{secret}}",
      sid=token("SK", Run(HEX, 32)), secret=token(Run(ALNUM, 32))),
    F("sendgrid-key", "saas",
      "python_http_client.exceptions.UnauthorizedError: HTTP Error 401: Unauthorized "
      "(api key {{key}})", key=token("SG.", Run(B64URL, 22), ".", Run(B64URL, 43))),
    F("mailgun-curl", "saas",
      "+ curl -s --user 'api:{{key}}' https://api.mailgun.net/v3/mg.acme.io/messages",
      key=token("key-", Run(HEX, 32))),
    F("pagerduty-routing-key", "saas",
      '{"routing_key": "{{key}}", "event_action": "trigger", "payload": {"summary": '
      '"GPU node down"}}', key=token(Run(HEX, 32))),
    F("opsgenie-header", "saas",
      "> Authorization: GenieKey {{key}}", key=_UUID),
    F("shopify-access-token", "saas",
      "> X-Shopify-Access-Token: {{token}}", token=token("shpat_", Run(HEX, 32))),
    F("atlassian-api-token", "saas",
      "+ curl -u me@acme.io:{{token}} https://acme.atlassian.net/rest/api/3/myself",
      token=token("ATATT3xFfGF0", Run(B64URL, 170), "=", Run(HEX, 8))),
    F("linear-api-key", "saas",
      "> Authorization: {{key}}", key=token("lin_api_", Run(ALNUM, 40))),
    F("notion-token", "saas",
      "NOTION_TOKEN={{token}}", token=token("ntn_", Run(ALNUM, 46))),
    F("postman-api-key", "saas",
      "> X-API-Key: {{key}}", key=token("PMAK-", Run(HEX, 24), "-", Run(HEX, 34))),
    F("newrelic-license-key", "saas",
      "newrelic.yml: license_key: '{{key}}'", key=token(Run(HEX, 36), "NRAL")),
    F("datadog-api-key", "saas", "DD_API_KEY={{key}}", key=token(Run(HEX, 32))),
    F("grafana-service-account-token", "saas",
      '+ curl -H "Authorization: Bearer {{token}}" https://grafana.acme.io/api/dashboards/home',
      token=token("glsa_", Run(ALNUM, 32), "_", Run(HEX, 8))),
    F("okta-ssws", "saas",
      "> Authorization: SSWS {{token}}", token=token("00", Run(B64URL, 40))),
    # --- keys and generic tokens -------------------------------------------------------------
    F("pem-rsa-private-key", "key",
      "-----BEGIN RSA PRIVATE KEY-----\n{{body}}\n-----END RSA PRIVATE KEY-----",
      body=pem_body(25)),
    F("pem-ec-private-key", "key",
      "-----BEGIN EC PRIVATE KEY-----\n{{body}}\n-----END EC PRIVATE KEY-----",
      body=pem_body(2, last=20)),
    F("pem-openssh-private-key", "key",
      "+ cat ~/.ssh/id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
      "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n{{body}}\n"
      "-----END OPENSSH PRIVATE KEY-----", body=pem_body(4, width=70)),
    F("pem-dsa-private-key", "key",
      "-----BEGIN DSA PRIVATE KEY-----\n{{body}}\n-----END DSA PRIVATE KEY-----",
      body=pem_body(10)),
    F("pem-encrypted-pkcs8", "key",
      "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{{body}}\n-----END ENCRYPTED PRIVATE KEY-----",
      body=pem_body(27)),
    F("pem-rsa-legacy-encrypted", "key",
      "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
      "{{iv}}\n\n{{body}}\n-----END RSA PRIVATE KEY-----", iv=token(Run(HEX.upper(), 32)),
      body=pem_body(25)),
    F("pem-truncated-by-log-cap", "key",
      "-----BEGIN PRIVATE KEY-----\n{{body}}", body=pem_body(12)),
    F("pgp-private-key-block", "key",
      "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: deploy key\n\n{{body}}\n={{crc}}\n"
      "-----END PGP PRIVATE KEY BLOCK-----", body=pem_body(20), crc=token(Run(B64, 4))),
    F("putty-ppk", "key",
      "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ci@acme\nPublic-Lines: 2\n"
      "AAAAC3NzaC1lZDI1NTE5AAAAIDbXbm5Z2cY0n5Ktq8yJ2xqP7b0hbqQZ0g4c1mYc8x3c\nAAAA\n"
      "Private-Lines: 1\n{{body}}\nPrivate-MAC: {{mac}}", body=token(Run(B64, 44)),
      mac=token(Run(HEX, 64))),
    F("kubeconfig-sa-token", "key",
      "users:\n- name: ci\n  user:\n    token: {{token}}",
      token=token("eyJhbGciOiJSUzI1NiIsImtpZCI6Ik", Run(B64URL, 40), ".",
                  "eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVzIl0sImV4cCI6", Run(B64URL, 200), ".",
                  Run(B64URL, 342))),
    F("kubeconfig-client-key-data", "key",
      "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n"
      "    client-key-data: {{key}}", key=pem_b64("EC PRIVATE KEY")),
    F("basic-auth-header", "key",
      "> GET /v2/acme/trainer/manifests/1.4.2 HTTP/1.1\n> Authorization: Basic {{auth}}",
      auth=basic_auth("ci", _pw())),
    F("jwt-in-query", "key",
      "GET /api/v1/stream?access_token={{token}} 101 Switching Protocols",
      token=token("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOi", Run(B64URL, 60), ".",
                  Run(B64URL, 43))),
    F("cookie-session", "key",
      "> Cookie: sessionid={{session}}; csrftoken={{csrf}}",
      session=token(Run(LOWER_ALNUM, 32)), csrf=token(Run(ALNUM, 32))),
    F("age-secret-key", "key",
      "# created: 2025-06-01T10:00:00Z\n# public key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8"
      "zmrj2kg5sfn9aqmcac8p\nAGE-SECRET-KEY-1{{key}}", key=token(Run(BECH32, 58))),
    F("env-dump-password", "key",
      "PATH=/usr/local/bin:/usr/bin\nHOSTNAME=trainer-0\nDB_PASSWORD={{password}}\nHOME=/root",
      password=_pw()),
    F("python-kwargs-repr", "key",
      "DEBUG connect(host='db', port=5432, user='app', password='{{password}}', sslmode="
      "'require')", password=_pw()),
    F("java-properties", "key",
      "spring.datasource.url=jdbc:mysql://mysql:3306/feast\nspring.datasource.username=feast\n"
      "spring.datasource.password={{password}}", password=_pw()),
    F("yaml-config-dump", "key",
      "loaded config:\n  database:\n    host: db\n    password: {{password}}\n  cache:\n"
      "    ttl: 300", password=_pw()),
    F("ruby-hash", "key",
      'ActiveRecord config: {:adapter=>"postgresql", :username=>"app", :password=>'
      '"{{password}}", :host=>"db"}', password=_pw()),
    F("escaped-json-log", "key",
      '{"level":"info","msg":"{\\"user\\": \\"app\\", \\"password\\": \\"{{password}}\\"}"}',
      password=_pw()),
)


def _escaped(secret: Secret) -> Secret:
    """A multi-line secret as a JSON string holds it (`\\n` escapes)."""
    return Secret(secret.value.replace("\n", "\\n"), secret.runs)


def render(fmt: CredentialFormat, rng: random.Random) -> Credential:
    line, values = fmt.line, {}
    runs: list[str] = []
    for name, make in fmt.secrets.items():
        secret = make(rng)
        values[name] = secret.value
        runs.extend(secret.runs)
        line = line.replace("{{" + name + "}}", secret.value)
    return Credential(fmt, line, values, tuple(runs))


def credentials(seed: int = 0) -> list[Credential]:
    """One generated credential per format; the same seed gives the same values."""
    return [render(fmt, random.Random(f"{seed}:{fmt.name}")) for fmt in FORMATS]
