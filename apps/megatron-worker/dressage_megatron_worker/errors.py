"""Errors with gRPC status codes, the Python side of @dressage/protocol's DressageError."""

from __future__ import annotations

import grpc


class WorkerError(Exception):
    """A failure to report to the client with a specific status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> WorkerError:
    return WorkerError(grpc.StatusCode.INVALID_ARGUMENT, message)
