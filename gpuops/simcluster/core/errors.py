"""API errors as Kubernetes `Status` objects, one constructor per reason."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, *,
                 details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message,
                                "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(kind: str, name: str, group: str = "") -> dict[str, Any]:
    d = {"name": name, "kind": kind}
    if group:
        d["group"] = group
    return d


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found',
                    details=_details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(409, "AlreadyExists", f'{what} "{name}" already exists',
                    details=_details(plural, name, group))


def conflict(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {what} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    details=_details(plural, name, group))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, field: str, message: str) -> ApiError:
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {message}',
                    details={"name": name, "kind": kind,
                             "causes": [{"reason": "FieldValueInvalid", "message": message,
                                         "field": field}]})


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_many_requests(message: str, retry_after: int = 1, *, causes: list | None = None) -> ApiError:
    details: dict[str, Any] = {"retryAfterSeconds": retry_after}
    if causes:
        details["causes"] = causes
    return ApiError(429, "TooManyRequests", message, details=details,
                    headers={"Retry-After": str(retry_after)})


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)
