"""KEDA's externalscaler.proto and the code grpcio-tools generates from it (`make protos`)."""
