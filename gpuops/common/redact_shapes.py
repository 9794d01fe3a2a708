"""The shapes of secrets in text, as the software that prints them writes them.

Families, in the order they are applied (whole blocks first, then tokens recognisable on their
own, then secrets recognisable only by what surrounds them):

- private-key blocks (`redact_blocks`);
- vendor tokens by prefix: clouds, CI systems, package registries, ML platforms, chat tools,
  payments and SaaS APIs (a prefix + alphabet + length the vendor documents);
- webhook URLs whose path is the credential (Slack, Discord, Teams, Mattermost, Telegram);
- HTTP credentials: Authorization / Cookie headers, `Bearer`/`Basic` values, userinfo in URLs
  (`scheme://user:pass@`, a token as the user), signed-URL parameters (`sig=`,
  `X-Amz-Signature=`...);
- command-line passwords: `mysql -pSECRET`, `docker login -p`, `redis-cli -a`, `curl -u
  user:pass`, `sshpass -p`, `sqlplus user/pass@`;
- key/value pairs under a secret-looking key, in every notation logs use: `key=value`,
  `key: value`, JSON `"key": "value"`, Python reprs `'key': 'value'` and `key='value'`, Ruby
  `:key => "value"`, XML `<password>value</password>`, connection strings
  (`Password=...;AccountKey=...;Pwd={...}`), netrc `machine h login u password p`, flags
  `--password VALUE`.

Every pattern is bounded and carries substrings without which it cannot match (checked first,
on the lower-cased text), so that a megabyte of log costs milliseconds, not seconds, and no
pattern turns quadratic on a long unbroken run.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

MASK = "[REDACTED]"

# --- what a secret-looking key is ---------------------------------------------------------------

# Counting and tokenizer words are not secrets (`max_tokens`, `tokenizer`, `eos_token_id`, the
# special tokens `pad_token`/`eos_token`...), nor is `PWD=/app` (the working directory).
_TOKEN = (r"(?<!pad_)(?<!eos_)(?<!bos_)(?<!unk_)(?<!cls_)(?<!sep_)(?<!mask_)"
          r"token(?!s|iz|_?ids?\b|_?count|_?len|_?type|_?usage|_?budget|_?limit|_?num)")
_SECRET_WORDS = (
    r"(?:pass(?:word|wd|phrase)|(?<![A-Za-z])pass(?![A-Za-z])|(?<![A-Za-z])pwd(?![A-Za-z])|"
    r"secret(?!_?name|_?ref)|" + _TOKEN + r"|"
    r"api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?key(?:[_-]?data)?|account[_-]?key|"
    r"shared[_-]?access[_-]?key|subscription[_-]?key|routing[_-]?key|license[_-]?key|"
    r"signing[_-]?key|master[_-]?key|encryption[_-]?key|auth[_-]?key|"
    r"credentials?|authorization|(?<![A-Za-z])_?auth(?![A-Za-z])|(?<=[_-])pat(?![A-Za-z])|"
    r"art[_-]api)"
)
# The key is matched from its secret word on (a prefix like `DB_` is kept as written anyway):
# a leading `[\w.-]*` would make every word boundary of a long log line a costly start. The
# look-ahead on the first letter lets the regex engine skip most positions quickly.
# ...and a key is not a source location (`secret.go:189]`) nor an exception class.
_SECRET_KEY = (r"(?=[pPsStTaAcCrRlLmMeE_])" + _SECRET_WORDS + r"[A-Za-z0-9_.-]{0,64}"
               r"(?<!\.go)(?<!\.py)(?<!\.cc)(?<!\.rs)(?<!\.js)(?<!\.java)(?<!Error)"
               r"(?<!Exception)")
_SECRET_KEY_RE = re.compile(_SECRET_WORDS, re.IGNORECASE)
_SECRET_WORD_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "credential", "auth",
                         "pat", "art")
_NOT_A_SECRET_KEY = re.compile(r"(?:old)?pwd|secret_?name|secret_?ref|.*_?(?:file|path)",
                               re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """A mapping key or field name whose value is a secret (`DB_PASSWORD`, `api_key`,
    `Authorization`, `client_secret`; not `max_tokens`, `tokenizer`, `secretName`)."""
    return bool(_SECRET_KEY_RE.search(key)) and not _NOT_A_SECRET_KEY.fullmatch(key)


# Values that are plainly no secret: null-ish words, masks others applied, placeholders, and
# the prose words that follow a key-looking word in messages (`auth: using in-cluster
# config`, `hf-token: secret "hf-token" not found`, `Credentials: Unable to locate`). Matched
# case-insensitively, as whole values only.
_NOT_A_VALUE = (r"(?!(?:None|null|nil|undefined|true|false|\*{3,}|\[REDACTED\]|"
                r"\(redacted\)|<[^>\n]{0,64}>|\$\{[^}\n]{0,64}\}|\$\([^)\n]{0,64}\)|"
                r"is|are|was|were|not|no|the|a|an|for|from|to|in|on|of|with|using|has|have|"
                r"set|unset|found|missing|required|enabled|disabled|invalid|expired|forbidden|"
                r"denied|unable|failed|provided|must|secrets?|passwords?|tokens?)"
                r"(?:[\s\"'`,;&)}\]]|$))")


# --- the shape type -------------------------------------------------------------------------------

Replacement = str | Callable[[re.Match[str]], str]


class Shape:
    """A secret's shape: a pattern, its replacement, and substrings (lower case) without
    which it cannot match, checked first. Repeats are bounded."""

    def __init__(self, pattern: str, replacement: Replacement, triggers: tuple[str, ...],
                 flags: int = 0) -> None:
        self.pattern = re.compile(pattern, flags)
        self.replacement = replacement
        self.triggers = triggers

    def apply(self, text: str, lowered: str) -> str:
        if not any(t in lowered for t in self.triggers):
            return text
        return self.pattern.sub(self.replacement, text)


def _token(prefix: str, body: str, *triggers: str, flags: int = 0) -> Shape:
    """A vendor token: a documented prefix, then its alphabet and length. Not inside a longer
    word (the look-behind), masked whole."""
    return Shape(r"(?<![A-Za-z0-9_-])" + prefix + body, MASK,
                 triggers or (prefix.lower().replace("\\", ""),), flags)


def _basic_credentials(m: re.Match[str]) -> str:
    """`Basic <base64>` is masked when it decodes to `user:password` (the word "basic" in
    prose is left alone)."""
    try:
        decoded = base64.b64decode(m.group(2) + "=" * (-len(m.group(2)) % 4), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group(1) + MASK if b":" in decoded else m.group(0)


def _xml_element(m: re.Match[str]) -> str:
    return f"<{m.group(1)}>{MASK}</{m.group(1)}>" if is_secret_key(m.group(1)) else m.group(0)


# --- vendor tokens ----------------------------------------------------------------------------

_B64URL = r"[A-Za-z0-9_-]"
VENDOR_TOKENS: list[Shape] = [
    # clouds
    _token(r"(?:AKIA|ASIA|ABIA|ACCA)", r"[A-Z0-9]{16}(?![A-Z0-9])", "akia", "asia", "abia",
           "acca"),
    _token(r"AIza", r"[0-9A-Za-z_-]{35}"),
    _token(r"GOCSPX-", _B64URL + r"{24,40}"),
    _token(r"ya29\.", _B64URL + r"{20,2048}", "ya29."),
    _token(r"1//0", _B64URL + r"{40,512}", "1//0"),
    _token(r"[A-Za-z0-9_~.-]{3}\dQ~", r"[A-Za-z0-9_~.-]{31,34}", "q~"),  # Entra ID secret
    _token(r"do[opr]_v1_", r"[a-f0-9]{64}", "do", "_v1_"),
    _token(r"LTAI", r"[A-Za-z0-9]{12,24}(?![A-Za-z0-9])"),
    # CI systems, source hosting, infrastructure tools
    _token(r"gh[pousr]_", r"[A-Za-z0-9]{30,255}", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    _token(r"github_pat_", r"[A-Za-z0-9_]{20,255}"),
    _token(r"gl(?:pat|dt|rt|rtr|ptt|ft|cbt|imt|oas|soat|agent|ffct|wt)-",
           r"[A-Za-z0-9_.-]{20,255}", "glpat-", "gldt-", "glrt", "glptt-", "glft-", "glcbt-",
           "glimt-", "gloas-", "glsoat-", "glagent-", "glffct-", "glwt-"),
    _token(r"GR1348941", _B64URL + r"{20,}", "gr1348941"),
    _token(r"CCIP(?:AT|RJ)_", r"[A-Za-z0-9]{20,24}_[a-f0-9]{40}", "ccipat_", "cciprj_"),
    _token(r"bkua_", r"[a-f0-9]{40}"),
    _token(r"hv[sbr]\.", _B64URL + r"{24,512}", "hvs.", "hvb.", "hvr."),
    _token(r"[A-Za-z0-9]{14}\.atlasv1\.", r"[A-Za-z0-9_=-]{60,100}", ".atlasv1."),
    _token(r"sq[pua]_", r"[a-f0-9]{40}", "sqp_", "squ_", "sqa_"),
    _token(r"sntr[ysu]{1,2}_", r"[A-Za-z0-9_=+/-]{40,512}", "sntrys_", "sntryu_"),
    _token(r"pul-", r"[a-f0-9]{40}"),
    _token(r"dp\.(?:pt|st|sa|ct|scim|audit)\.", r"[A-Za-z0-9]{40,64}", "dp."),
    _token(r"tskey-", r"[A-Za-z0-9-]{20,128}"),
    _token(r"ATBB", r"[A-Za-z0-9_=.-]{28,64}", "atbb"),
    _token(r"AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    # package registries
    _token(r"npm_", r"[A-Za-z0-9]{36}"),
    _token(r"pypi-AgE", _B64URL + r"{50,}", "pypi-"),
    _token(r"dckr_(?:pat|oat)_", _B64URL + r"{20,64}", "dckr_"),
    _token(r"rubygems_", r"[a-f0-9]{48}"),
    _token(r"oy2", r"[a-z0-9]{43}(?![a-z0-9])"),
    _token(r"AKCp", r"[A-Za-z0-9]{60,80}", "akcp"),
    _token(r"cmVmdGtu", r"[A-Za-z0-9+/=_-]{40,}", "cmvmdgtu"),  # JFrog reference token
    _token(r"cio", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),  # crates.io
    # ML platforms and AI APIs
    # OpenAI, Anthropic (sk-ant-), DeepSeek, Stripe (sk_live_), Hugging Face: random bodies
    # mix case and digits (`sk-learn-baseline` is a model name)
    _token(r"(?:sk|hf)[-_]", r"(?=" + _B64URL + r"{0,256}[A-Z])(?=" + _B64URL + r"{0,256}\d)"
           + _B64URL + r"{16,}", "sk-", "sk_", "hf_", "hf-"),
    _token(r"api_org_", r"[A-Za-z0-9]{30,40}"),
    _token(r"r8_", r"[A-Za-z0-9]{37}"),
    _token(r"gsk_", r"[A-Za-z0-9]{48,64}"),
    _token(r"nvapi-", _B64URL + r"{60,80}"),
    _token(r"pcsk_", r"[A-Za-z0-9_]{40,120}"),
    _token(r"lsv2_(?:pt|sk)_", r"[a-f0-9]{32}_[a-f0-9]{10}", "lsv2_"),
    _token(r"pplx-", r"[A-Za-z0-9]{40,64}"),
    _token(r"xai-", r"[A-Za-z0-9]{60,100}"),
    _token(r"dapi", r"[a-f0-9]{32}(?:-\d)?", "dapi"),
    _token(r"a[ks]-", r"[A-Za-z0-9]{20,32}(?![A-Za-z0-9])", "ak-", "as-"),  # Modal
    # chat tools
    _token(r"xox(?:[abposre]|e\.xox[bp])-", r"[A-Za-z0-9_-]{10,}", "xox"),
    _token(r"xapp-", r"[A-Za-z0-9_-]{10,}"),
    # payments and SaaS APIs
    _token(r"[rp]k_(?:live|test)_", r"[A-Za-z0-9]{16,}", "k_live_", "k_test_"),
    _token(r"whsec_", r"[A-Za-z0-9+/=]{24,}"),
    _token(r"SK", r"[0-9a-f]{32}(?![0-9a-f])", "sk"),  # Twilio API key
    _token(r"SG\.", _B64URL + r"{16,32}\." + _B64URL + r"{16,64}", "sg."),
    _token(r"shp(?:at|ca|pa|ss)_", r"[a-fA-F0-9]{32}", "shpat_", "shpca_", "shppa_", "shpss_"),
    _token(r"AT[AC]TT", r"[A-Za-z0-9_=+/-]{40,}", "atatt", "atctt"),
    _token(r"lin_api_", r"[A-Za-z0-9]{40}"),
    _token(r"ntn_", r"[A-Za-z0-9]{40,60}"),
    _token(r"secret_", r"[A-Za-z0-9]{43}(?![A-Za-z0-9])"),  # Notion (legacy)
    _token(r"PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}", "pmak-"),
    _token(r"NRAK-", r"[A-Z0-9]{27}", "nrak-"),
    _token(r"", r"[a-f0-9]{36}NRAL(?![A-Za-z0-9])", "nral"),  # New Relic license key
    _token(r"gl(?:c|sa)_", r"[A-Za-z0-9+/=_-]{32,}", "glc_", "glsa_"),
    _token(r"key-", r"[0-9a-f]{32}(?![0-9a-f])"),  # Mailgun
    _token(r"[sp]k\.eyJ", _B64URL + r"{20,}\." + _B64URL + r"{10,}", "k.eyj"),  # Mapbox
    _token(r"sq0(?:atp|csp)-", _B64URL + r"{22,43}", "sq0"),
    # JWTs (service-account tokens, OIDC id tokens, cloud access tokens)
    _token(r"eyJ", _B64URL + r"{8,}\." + _B64URL + r"{8,}\." + _B64URL + r"{8,}", "eyj"),
    # Discord bot tokens (three segments, the middle one six characters), Telegram bot tokens
    _token(r"[MNO][A-Za-z0-9_-]{23,27}\.", _B64URL + r"{6}\." + _B64URL + r"{27,40}", "."),
    _token(r"\d{8,10}:AA", _B64URL + r"{33}", ":aa"),
]

# --- context shapes ---------------------------------------------------------------------------

_QUOTED = r"(?:\"[^\"\n]{0,1024}\"|'[^'\n]{0,1024}')"
_FLAG_VALUE = r"(?:" + _QUOTED + r"|[^\s'\"][^\s]{0,1023})"

CONTEXT_SHAPES: list[Shape] = [
    # webhook URLs: the path is the credential
    Shape(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+", r"\1" + MASK,
          ("hooks.slack.com",)),
    Shape(r"(discord(?:app)?\.com/api/webhooks/)[0-9]{1,20}/[A-Za-z0-9_-]+", r"\1" + MASK,
          ("/api/webhooks/",)),
    Shape(r"(\.webhook\.office\.com/webhookb2/)[^\s\"'<>]+", r"\1" + MASK, ("webhook.office",)),
    Shape(r"(/hooks/)[a-z0-9]{26}(?![a-z0-9])", r"\1" + MASK, ("/hooks/",)),
    Shape(r"(api\.telegram\.org/(?:file/)?bot)[^/\s]+", r"\1" + MASK, ("api.telegram.org",)),
    # HTTP: the whole value of an Authorization or Cookie header, whatever its scheme
    Shape(r"((?:proxy-)?authorization|(?:set-)?cookie)([\"']?[ \t]{0,8}[:=][ \t]{0,8})([\"']?)"
          r"(?!\[REDACTED\])" + _NOT_A_VALUE + r"[^\r\n\"']{1,4096}", r"\1\2\3" + MASK,
          ("authorization", "cookie"), re.IGNORECASE),
    # a bearer token has a digit or is long (`Bearer authentication` is prose)
    Shape(r"(?<![A-Za-z0-9])(bearer)([ \t]{1,8})(?=[A-Za-z0-9._~+/=-]{0,1024}\d|"
          r"[A-Za-z0-9._~+/=-]{20})[A-Za-z0-9._~+/=-]{12,}", r"\1\2" + MASK,
          ("bearer",), re.IGNORECASE),
    Shape(r"(?<![A-Za-z0-9])(basic[ \t]{1,8})([A-Za-z0-9+/]{8,4096}={0,2})", _basic_credentials,
          ("basic",), re.IGNORECASE),
    Shape(r"(?<![A-Za-z0-9])(token)([ \t]{1,8})(?=[A-Za-z0-9._~+/=-]{0,256}\d)"
          r"[A-Za-z0-9._~+/=-]{12,}", r"\1\2" + MASK, ("token",), re.IGNORECASE),
    # URL userinfo: scheme://user:password@ (the user may be empty, the password may hold '/'
    # or '@': masked to the last '@'), and scheme://TOKEN@ (a long token as the user)
    Shape(r"((?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^/\s:@]{0,256}:)"
          r"(?:[^\s@]{0,2048}@){1,4}", r"\1" + MASK + "@", ("://",)),
    Shape(r"((?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[A-Za-z0-9_.~%+-]{20,256}@",
          r"\1" + MASK + "@", ("://",)),
    # signed URLs and connection-string signatures
    Shape(r"([?&;](?:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token|"
          r"x-goog-credential)=)[^&\s\"'#;]+", r"\1" + MASK,
          ("sig=", "signature=", "security-token=", "credential="), re.IGNORECASE),
    # AWS's secret key names, whatever the separator (INI files use `=` with spaces)
    Shape(r"(aws_secret_access_key|aws_session_token)([\"']?[ \t]{0,8}[=:][ \t]{0,8}[\"']?)"
          r"[^\s\"']+", r"\1\2" + MASK, ("aws_secret_access_key", "aws_session_token"),
          re.IGNORECASE),
    # command-line passwords where the flag alone says nothing (`-p` is a port elsewhere)
    Shape(r"(\b(?:mysql|mysqladmin|mysqldump|mysqlimport|mysqlcheck|mysqlsh|mariadb)\b"
          r"[^\n]{0,512}?[ \t]-p)(" + _QUOTED + r"|[^\s'\"-][^\s]{0,255})", r"\1" + MASK,
          ("mysql", "mariadb")),
    Shape(r"(\b(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|helm registry|az|"
          r"regctl registry)[ \t]+login\b[^\n]{0,512}?[ \t](?:-p|--password))([ \t]+|=)"
          + _FLAG_VALUE, r"\1\2" + MASK, ("login",)),
    *(Shape(r"(\b" + command + r"\b[^\n]{0,512}?[ \t]" + flag + r")([ \t]+)" + _FLAG_VALUE,
            r"\1\2" + MASK, (trigger,))
      for command, flag, trigger in (
          ("sshpass", "-p", "sshpass"), ("redis-cli", "-a", "redis-cli"),
          ("(?:mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport)", "-p", "mongo"),
          ("(?:sqlcmd|bcp)", "-P", "sqlcmd"))),
    Shape(r"((?<![\w-])(?:-u|--user|--proxy-user)(?:[ \t]+|=)['\"]?[^\s:'\"@]{1,128}:)"
          r"(?!\d{1,6}(?:[\s'\"]|$))[^\s'\"]{1,1024}", r"\1" + MASK, ("-u", "-user")),
    Shape(r"(\bsqlplus[ \t]+(?:-[sSlL][ \t]+)*[^\s/@]{1,128}/)[^\s@]{1,256}(?=@)", r"\1" + MASK,
          ("sqlplus",)),
    # netrc: machine HOST login USER password PASS (on one line or several)
    Shape(r"(\bmachine[ \t\r\n]{1,16}\S{1,256}[ \t\r\n]{1,16}(?:login[ \t\r\n]{1,16}"
          r"\S{1,256}[ \t\r\n]{1,16})?password[ \t]{1,16})\S{1,1024}", r"\1" + MASK,
          ("machine",)),
    # XML elements: <password>...</password>, <token>...</token>
    Shape(r"<([A-Za-z][A-Za-z0-9_.:-]{0,40})>[^<\n]{1,1024}</\1>", _xml_element, ("</",)),
    # key = value / key: value / "key": "value" / 'key': b'value' / :key => "value";
    # quoted values whole, {braced} ODBC values whole
    Shape(r"(" + _SECRET_KEY + r")(\\?[\"']?[ \t]{0,8}(?:=>|[=:])[ \t]{0,8}b?)(\\?[\"'])"
          r"(?:(?!\3)[^\n]){0,1024}\3", r"\1\2\3" + MASK + r"\3", _SECRET_WORD_TRIGGERS,
          re.IGNORECASE),
    Shape(r"(" + _SECRET_KEY + r")([\"']?[ \t]{0,8}[=:][ \t]{0,8})\{[^}\n]{0,256}\}",
          r"\1\2{" + MASK + "}", _SECRET_WORD_TRIGGERS, re.IGNORECASE),
    Shape(r"(" + _SECRET_KEY + r")(\\?[\"']?[ \t]{0,8}(?:=>|[=:])[ \t]{0,8}\\?[\"']?)"
          r"(?!\[REDACTED\])" + _NOT_A_VALUE + r"([^\s\"',;&]+)", r"\1\2" + MASK,
          _SECRET_WORD_TRIGGERS, re.IGNORECASE),
    # command-line flags: --password VALUE, --api-key=VALUE, -auth user:token
    Shape(r"((?<![\w-])--?[A-Za-z0-9_-]{0,32}?" + _SECRET_KEY + r")([ \t]{1,8}|=)(?!-)"
          r"(?!\[REDACTED\])" + _NOT_A_VALUE + _FLAG_VALUE, r"\1\2" + MASK,
          _SECRET_WORD_TRIGGERS, re.IGNORECASE),
]
